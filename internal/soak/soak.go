package soak

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"idemshop/internal/platform/config"
	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/platform/retry"
)

// Stock of every product but the low-stock one: ample, so that out-of-stock stays rare.
const ampleStock = 100_000

// confirmAfter is the wait between a passing check and the one that confirms it: longer than the
// soak's chaos delays a planned delivery can still carry (jitter, delay_success) and than the last
// steps of the compressed callback retry ladder.
const confirmAfter = 3 * time.Second

// declinePrice is the extra product's price: payments-mock declines amount_cents % 100 == 13.
const declinePrice = 1013

// SetupError is a failure to set the run up (exit 2), as opposed to what the run found.
type SetupError struct{ Err error }

func (e SetupError) Error() string { return e.Err.Error() }
func (e SetupError) Unwrap() error { return e.Err }

// scheduled is one fault of the plan with the injector that fires it.
type scheduled struct {
	f   Fault
	inj Injector
}

// Run runs one soak: set up, drive and break the shop for o.Duration, stop the faults, wait for
// quiescence, check convergence, tear everything down. The error is a SetupError or the context's
// (interrupted); what the run found is in the report, whose OK says whether it passed.
func Run(ctx context.Context, o Options) (rep *Report, err error) {
	log := o.Log
	progress := o.Progress
	if progress == nil {
		progress = func(string) {}
	}
	rep = &Report{Seed: o.Seed, RunID: o.RunID, Faults: o.Faults, Chaos: o.Chaos, DurationS: o.Duration.Seconds(),
		ConvergeSeconds: -1, ConvergeLimitS: o.Converge.Seconds(), ByKind: map[string]int{}}

	// The whole plan comes from the one seeded RNG, drawn before anything runs.
	rng := newRNG(o.Seed)
	rep.Clients = 6 + rng.IntN(5)
	var chaosPlan []chaosStep
	if o.Chaos {
		chaosPlan = planChaos(rng, o.Duration)
	} else {
		chaosPlan = []chaosStep{{0, ChaosSettings{Duplicates: 1, Parallel: true, Seed: rng.Uint64()}}}
	}
	clientRNG := make([]*mrand.Rand, rep.Clients)
	for i := range clientRNG {
		clientRNG[i] = derive(rng)
	}

	// Infra faults break private instances the soak starts itself (infra.go), never the machine's
	// shared PostgreSQL, Redis and RabbitMQ: the shop is pointed at them.
	var infra *privateInfra
	if o.Faults == FaultsInfra || o.Faults == FaultsAll {
		progress("starting a private PostgreSQL, Redis and RabbitMQ")
		infra, err = startInfra(ctx, o.RunID, log)
		// Registered before the stack's cleanup, so it runs after it: the services stop first.
		defer func() {
			for _, e := range infra.down() {
				rep.Notes = append(rep.Notes, "cleanup: "+e.Error())
			}
		}()
		if err != nil {
			return rep, setupOr(ctx, err)
		}
		rep.Infra = &infra.info
		shared := map[string]string{svcPostgres: o.PostgresURL, svcRedis: o.RedisURL, svcRabbit: o.AMQPURL}
		o.private = map[string]bool{}
		for svc, url := range map[string]*string{svcPostgres: &o.PostgresURL, svcRedis: &o.RedisURL, svcRabbit: &o.AMQPURL} {
			if u := infra.url(svc); u != "" {
				*url = u
				o.private[svc] = true
			} else {
				if infra.info.Shared == nil {
					infra.info.Shared = map[string]string{}
				}
				infra.info.Shared[svc] = config.RedactURL(shared[svc]) // the report and its JSON are kept in CI logs
			}
		}
		if len(infra.info.Missing) > 0 {
			var why []string
			for _, svc := range []string{svcPostgres, svcRedis, svcRabbit} {
				if m := infra.info.Missing[svc]; m != "" {
					why = append(why, svc+": "+m)
				}
			}
			msg := "these infra faults cannot be injected (no private instance; the shared one is never broken): " +
				strings.Join(why, "; ")
			if o.RequireInfra {
				return rep, SetupError{errors.New(msg + " (SOAK_INFRA_REQUIRED=true)")}
			}
			rep.Notes = append(rep.Notes, msg)
		}
		log.Info("soak: private infra", "dir", infra.dir, "instances", infra.info.Instances, "start_s", infra.info.StartS)
	}

	st, err := newStack(o)
	if err != nil {
		return rep, SetupError{err}
	}
	var injectors []Injector
	if o.Faults == FaultsProcess || o.Faults == FaultsAll {
		injectors = append(injectors, processFaults{orders: st.orders, points: st.points})
	}
	if infra != nil {
		injectors = append(injectors, infraFaults{in: infra, dbName: st.dbName})
	}
	var plan []scheduled
	for _, inj := range injectors {
		for _, f := range inj.Plan(rng, o.Duration) {
			plan = append(plan, scheduled{f, inj})
		}
	}
	slices.SortStableFunc(plan, func(a, b scheduled) int { return int(a.f.At - b.f.At) })

	log.Info("soak", "seed", o.Seed, "run", o.RunID, "duration", o.Duration, "faults", o.Faults, "chaos", o.Chaos,
		"clients", rep.Clients, "logs", st.logs)
	defer func() {
		progress("cleaning up")
		for _, e := range st.down() {
			rep.Notes = append(rep.Notes, "cleanup: "+e.Error())
		}
		progress("")
		// Counted before a passing run's logs go: a pass said nothing of its ERROR lines and ALERTs,
		// which reliability.md says are worth reading (a fresh soak helper's finding, 2026-12-07).
		counted, cerr := countLogLines(st.logs)
		rep.ServiceLogs = counted
		if cerr != nil {
			rep.Notes = append(rep.Notes, "logs: "+cerr.Error())
		}
		if st.ownLogs && err == nil && rep.OK() && cerr == nil {
			_ = os.RemoveAll(st.logs)
		} else {
			rep.Logs = st.logs
		}
	}()

	// Set up: the platform and orders (which creates and migrates the database), the data, the consumer.
	progress("starting payments-mock and orders")
	if err := st.upPlatformAndOrders(ctx); err != nil {
		return rep, setupOr(ctx, err)
	}
	users, products, initial, err := prepare(ctx, st.dbURL)
	if err != nil {
		return rep, setupOr(ctx, err)
	}
	progress("starting points-consumer")
	if err := st.points.start(ctx); err != nil {
		return rep, setupOr(ctx, err)
	}
	plat := &platform{base: st.paymentsURL(), adminToken: o.AdminToken, http: newHTTPClient(o.HTTPTimeout)}
	cs := &chaosSetter{p: plat}
	first := cs.set(ctx, chaosPlan[0].s, true, 0)
	rep.ChaosUsed = append(rep.ChaosUsed, first)
	if first.Error != "" {
		return rep, setupOr(ctx, errors.New(first.Error))
	}

	// Run: clients, chaos changes and faults, all against one clock.
	t0 := time.Now()
	end := t0.Add(o.Duration)
	hardEnd := end.Add(o.Grace)
	w := newWorkload(st.ordersURL(), plat, o.HTTPTimeout, users, products)
	w.t0 = t0
	rc := &recoverer{st: st, t0: t0, probe: newWorkload(st.ordersURL(), plat, o.HTTPTimeout, users, products),
		user: users[0], product: probeProduct(products)}
	var clients sync.WaitGroup
	for i := range rep.Clients {
		c := &client{id: i + 1, w: w, rng: clientRNG[i], end: end, hardEnd: hardEnd}
		clients.Go(func() { c.run(ctx) })
	}
	stopFaults := make(chan struct{})
	var mu sync.Mutex // guards rep.ChaosUsed and rep.Injected while the schedulers run
	var sched sync.WaitGroup
	sched.Go(func() {
		for _, step := range chaosPlan[1:] {
			if !waitUntil(ctx, stopFaults, t0.Add(step.at)) {
				return
			}
			c := cs.set(ctx, step.s, true, time.Since(t0))
			mu.Lock()
			rep.ChaosUsed = append(rep.ChaosUsed, c)
			mu.Unlock()
		}
	})
	sched.Go(func() {
		// One fault at a time: each waits for the recovery measurement of the one before (recovery.go),
		// so it may fire later than planned. What the run's end leaves unfired is listed as such.
		for i, s := range plan {
			if !waitUntil(ctx, stopFaults, t0.Add(s.f.At)) {
				mu.Lock()
				for _, r := range plan[i:] {
					rep.NotFired = append(rep.NotFired, r.f)
				}
				mu.Unlock()
				return
			}
			f := s.f
			f.AtS = round2(time.Since(t0).Seconds())
			log.Info("soak: fault", "kind", f.Kind, "at", f.AtS, "pause", f.Pause)
			if err := rc.fire(ctx, s.inj, &f); err != nil {
				f.Error = err.Error()
				log.Warn("soak: fault did not heal", "kind", f.Kind, "err", err)
			}
			if f.NotInjected != "" {
				log.Warn("soak: fault NOT injected", "kind", f.Kind, "why", f.NotInjected)
			} else if r := f.Recovery; r != nil {
				log.Info("soak: fault healed", "kind", f.Kind, "detail", f.Detail, "healed_s", r.HealedS,
					"ready_s", r.ReadyS, "probe_s", r.ProbeS, "points_s", r.PointsS, "probe_order", r.ProbeOrder, "note", r.ProbeNote)
			}
			mu.Lock()
			rep.Injected = append(rep.Injected, f)
			if f.NotInjected == "" {
				rep.ByKind[f.Kind]++
			}
			mu.Unlock()
		}
	})
	ticker := time.NewTicker(time.Second)
	for running := true; running; {
		select {
		case <-ctx.Done():
			running = false
		case now := <-ticker.C:
			if !now.Before(end) {
				running = false
			}
			w.mu.Lock()
			n := len(w.created)
			w.mu.Unlock()
			progress(fmt.Sprintf("soak t=%.0fs/%.0fs orders=%d", now.Sub(t0).Seconds(), o.Duration.Seconds(), n))
		}
	}
	ticker.Stop()

	// Stop the faults: no more chaos, every process up.
	progress("stopping the faults")
	close(stopFaults)
	sched.Wait()
	if ctx.Err() != nil {
		clients.Wait()
		rep.Interrupted = true
		return rep, ctx.Err()
	}
	calm := calmChaos
	calm.Seed = chaosPlan[0].s.Seed
	rep.ChaosUsed = append(rep.ChaosUsed, cs.set(ctx, calm, false, time.Since(t0)))
	// The infra first: a restarted process needs its database.
	for _, inj := range slices.Backward(injectors) {
		if err := inj.Heal(ctx); err != nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s faults did not heal: %v", inj.Name(), err))
		}
	}
	faultStop := time.Now()

	// The clients finish their retries (each bounded by hardEnd).
	progress("clients finishing their retries")
	clients.Wait()
	if ctx.Err() != nil {
		rep.Interrupted = true
		return rep, ctx.Err()
	}
	w.mu.Lock()
	rep.OrdersCreated = len(w.created)
	rep.ClientErrors, rep.ErrorsByCode, rep.ClientOutcome = w.errors, w.byCode, w.outcomes
	rep.BackOffice, rep.RefundRefused = w.refunds, w.refundNote
	answered := w.created
	found := append([]Violation{}, w.violations...)
	rep.OutsideErrors, rep.AfterErrors, rep.OutsideS = attribute(rep.Injected, w.timeline, o.Duration)
	w.mu.Unlock()
	// The probe orders are orders like the clients': their answers must hold too.
	rc.probe.mu.Lock()
	rep.ProbeOrders = len(rc.probe.created)
	for id, pid := range rc.probe.created {
		answered[id] = pid
	}
	found = append(found, rc.probe.violations...)
	rc.probe.mu.Unlock()
	for _, p := range st.procs() {
		for _, s := range p.surprises() {
			found = append(found, Violation{Check: "process stays up", Subject: p.name, Detail: s})
		}
	}

	// Quiescence: poll the convergence check until it passes twice in a row, confirmAfter apart (a
	// delivery still on its way must not undo a passing check), or the bound ends. The time to converge
	// is that of the first of the two passes.
	sn := &snapshotter{plat: plat, dbURL: st.dbURL, amqpURL: o.AMQPURL, initialStock: initial,
		topology: rabbitmq.OrderPaidTopology().WithPrefix(st.prefix), answered: answered}
	deadline := faultStop.Add(o.Converge)
	var last []Violation
	var snap Snapshot
	var passedAt time.Time // zero unless the previous check passed
	for i := 0; ; i++ {
		progress(fmt.Sprintf("waiting for quiescence: check %d, %.0fs left", i+1, time.Until(deadline).Seconds()))
		s, err := sn.take(ctx)
		rep.Checks++
		now := time.Now()
		if err != nil {
			last = []Violation{{Check: "convergence check", Subject: "soak", Detail: err.Error()}}
		} else {
			snap, last = s, Check(s)
		}
		switch {
		case len(last) > 0 && !passedAt.IsZero():
			rep.Notes = append(rep.Notes, fmt.Sprintf("the check passed %.1fs after the faults stopped, then failed again %.1fs later",
				passedAt.Sub(faultStop).Seconds(), now.Sub(passedAt).Seconds()))
			passedAt = time.Time{}
		case len(last) == 0 && passedAt.IsZero():
			passedAt = now
		case len(last) == 0:
			rep.Converged = true
			rep.ConvergeSeconds = round2(passedAt.Sub(faultStop).Seconds())
		}
		if rep.Converged {
			break
		}
		if ctx.Err() != nil {
			rep.Interrupted = true
			return rep, ctx.Err()
		}
		wait := time.Second
		if !passedAt.IsZero() {
			wait = confirmAfter // a pass is always confirmed, even past the deadline
		} else if now.Add(wait).After(deadline) {
			break
		}
		retry.Sleep(ctx, wait)
	}
	found = append(found, last...)
	rep.ViolationCount = len(found)
	rep.ByCheck = map[string]int{}
	for _, v := range found {
		rep.ByCheck[v.Check]++
	}
	rep.Violations = found[:min(len(found), maxListed)]
	summarize(rep, snap)
	return rep, nil
}

// summarize fills the report's counts from the last snapshot.
func summarize(rep *Report, s Snapshot) {
	rep.OrderStatuses = map[string]int{}
	for _, o := range s.Orders {
		rep.OrderStatuses[o.Status]++
	}
	rep.Payments = len(s.Payments)
	rep.PaymentStatus = map[string]int{}
	for _, p := range s.Payments {
		st := p.Status
		if p.Status == "SUCCESS" && p.RefundedCents > 0 {
			st = "SUCCESS partly refunded"
		}
		rep.PaymentStatus[st]++
	}
	rep.Refunds = len(s.Refunds)
	rep.ShopRefunds = map[string]int{}
	for _, r := range s.RefundRequests {
		rep.ShopRefunds[r.Reason]++
	}
}

// waitUntil waits for t; false when the faults stopped or ctx ended first. A fault that is late
// (the one before took longer) never fires once the faults have stopped.
func waitUntil(ctx context.Context, stop <-chan struct{}, t time.Time) bool {
	select {
	case <-stop:
		return false
	default:
	}
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	case <-timer.C:
		return true
	}
}

func setupOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return SetupError{err}
}

// prepare adds the soak's data to the fresh database: ample stock everywhere but on the low-stock
// (flash-sale) product, and one product priced 1013 cents that payments-mock declines. It returns the
// demo users, the products (the low-stock one first) and every product's initial stock.
func prepare(ctx context.Context, dbURL string) ([]user, []product, map[int64]int64, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("connect to the run's database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	var flash int64
	if err := conn.QueryRow(ctx, `SELECT id FROM products ORDER BY stock, id LIMIT 1`).Scan(&flash); err != nil {
		return nil, nil, nil, fmt.Errorf("read products: %w", err)
	}
	if _, err := conn.Exec(ctx, `UPDATE products SET stock = $1 WHERE id <> $2`, ampleStock, flash); err != nil {
		return nil, nil, nil, fmt.Errorf("stock up products: %w", err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO products (sku, name, price_cents, currency, stock)
		VALUES ('SOAK-DECLINE', 'Soak: declined at 10.13', $1, 'EUR', $2)`, declinePrice, ampleStock); err != nil {
		return nil, nil, nil, fmt.Errorf("insert the decline product: %w", err)
	}
	rows, _ := conn.Query(ctx, `SELECT id, price_cents, stock FROM products ORDER BY id`)
	type row struct{ ID, Price, Stock int64 }
	ps, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read products: %w", err)
	}
	initial := map[int64]int64{}
	var products []product
	for _, p := range ps {
		initial[p.ID] = p.Stock
		if p.ID == flash {
			products = append([]product{{ID: p.ID, Price: p.Price, Flash: true}}, products...)
		} else {
			products = append(products, product{ID: p.ID, Price: p.Price})
		}
	}
	rows, _ = conn.Query(ctx, `SELECT id, name FROM users WHERE name IN ('alice', 'bob', 'carol') ORDER BY id`)
	type urow struct {
		ID   int64
		Name string
	}
	us, err := pgx.CollectRows(rows, pgx.RowToStructByPos[urow])
	if err != nil || len(us) == 0 {
		return nil, nil, nil, fmt.Errorf("read the demo users: %v (found %d)", err, len(us))
	}
	users := make([]user, 0, len(us))
	for _, u := range us {
		users = append(users, user{ID: u.ID, Name: u.Name, Token: strings.ToLower(u.Name) + "-token"})
	}
	return users, products, initial, nil
}
