package soak

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"regexp"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// The infra fault kinds (SOAK_FAULTS=infra or all). Each breaks one of the soak's private instances,
// never the machine's shared services.
const (
	RabbitRestart     = "rabbitmq-restart"     // rabbitmqctl stop_app, pause, start_app
	RabbitCloseConns  = "rabbitmq-close-conns" // rabbitmqctl close_all_connections "soak"
	RabbitAlarm       = "rabbitmq-alarm"       // a memory alarm raised on the node, pause, cleared
	RedisRestart      = "redis-restart"        // SHUTDOWN NOSAVE, pause, redis-server again, empty, same port
	PostgresRestart   = "postgres-restart"     // pg_ctl stop -m fast, pause, pg_ctl start
	PostgresTerminate = "postgres-terminate"   // pg_terminate_backend of every backend on the run's database
)

// InfraKinds lists the infra fault kinds in a fixed order (the plan permutes it with the seed).
var InfraKinds = []string{RabbitRestart, RabbitCloseConns, RedisRestart, PostgresRestart, PostgresTerminate, RabbitAlarm}

func serviceOf(kind string) string {
	switch kind {
	case RabbitRestart, RabbitCloseConns, RabbitAlarm:
		return svcRabbit
	case RedisRestart:
		return svcRedis
	}
	return svcPostgres
}

// infraFaults breaks the private PostgreSQL, Redis and RabbitMQ while orders flow.
type infraFaults struct {
	in     *privateInfra
	dbName string // the run's database: its backends are the ones terminated
}

func (infraFaults) Name() string { return FaultsInfra }

// Plan draws every infra kind once per started minute of run (a 30 s run gets all six too), in a
// seeded order, one per equal slot of 5%..80% of the run at a seeded point of its slot. The restarts
// keep their service down, and the alarm its broker blocking publishers, for a seeded 1..4 s pause
// (plus the stop and start themselves); closing the connections and terminating the backends are
// instantaneous.
func (infraFaults) Plan(r *mrand.Rand, d time.Duration) []Fault {
	rounds := max(1, int(d/time.Minute))
	n := rounds * len(InfraKinds)
	lo, hi := d/20, d*80/100
	slot := (hi - lo) / time.Duration(n)
	out := make([]Fault, 0, n)
	for round := range rounds {
		for i, k := range r.Perm(len(InfraKinds)) {
			f := Fault{Kind: InfraKinds[k]}
			f.At = lo + slot*time.Duration(round*len(InfraKinds)+i) + between(r, 0, slot*3/4)
			switch f.Kind {
			case RabbitRestart, RedisRestart, PostgresRestart, RabbitAlarm:
				f.Pause = between(r, time.Second, 4*time.Second)
			}
			f.AtS, f.PauseS = round2(f.At.Seconds()), round2(f.Pause.Seconds())
			out = append(out, f)
		}
	}
	slices.SortStableFunc(out, func(a, b Fault) int { return int(a.At - b.At) })
	return out
}

var closedConns = regexp.MustCompile(`Closed (\d+) connections?`)

func (x infraFaults) Inject(ctx context.Context, f *Fault) error {
	svc := serviceOf(f.Kind)
	if why := x.in.info.Missing[svc]; why != "" {
		return fmt.Errorf("%w: no private %s (%s); the machine's shared one is never broken", ErrNotInjected, svc, why)
	}
	// Like the process faults, the pause and the heal are not cut short by ctx: what was stopped must
	// come back in any case.
	hctx := context.WithoutCancel(ctx)
	switch f.Kind {
	case RabbitRestart:
		r := x.in.rabbit
		t := time.Now()
		if _, err := r.Ctl(hctx, "stop_app"); err != nil {
			return err
		}
		stopS := time.Since(t).Seconds()
		time.Sleep(f.Pause)
		t = time.Now()
		_, err := r.Ctl(hctx, "start_app")
		f.Detail = fmt.Sprintf("rabbitmqctl -n %s stop_app (%.1fs), %.1fs pause, start_app (%.1fs)",
			r.Node, stopS, f.Pause.Seconds(), time.Since(t).Seconds())
		return err
	case RabbitCloseConns:
		r := x.in.rabbit
		out, err := r.Ctl(hctx, "close_all_connections", "soak")
		closed := "?"
		if m := closedConns.FindStringSubmatch(out); m != nil {
			closed = m[1]
		}
		f.Detail = fmt.Sprintf(`rabbitmqctl -n %s close_all_connections "soak": %s connections closed`, r.Node, closed)
		return err
	case RabbitAlarm:
		// Every publishing connection is blocked until the clear: the pause, plus up to each call's time.
		r := x.in.rabbit
		t := time.Now()
		if err := r.MemoryAlarm(hctx, true); err != nil {
			return err
		}
		setS := time.Since(t).Seconds()
		time.Sleep(f.Pause)
		t = time.Now()
		err := r.MemoryAlarm(hctx, false)
		f.Detail = fmt.Sprintf("rabbitmqctl -n %s eval rabbit_alarm:set_alarm (memory) (%.1fs), %.1fs pause, clear_alarm (%.1fs)",
			r.Node, setS, f.Pause.Seconds(), time.Since(t).Seconds())
		return err
	case RedisRestart:
		r := x.in.redis
		t := time.Now()
		err := r.shutdownNoSave(hctx)
		time.Sleep(f.Pause)
		if err2 := r.start(hctx); err2 != nil {
			return errors.Join(err, err2)
		}
		f.Detail = fmt.Sprintf("SHUTDOWN NOSAVE, redis-server started again empty on 127.0.0.1:%d after %.1fs down",
			r.port, time.Since(t).Seconds())
		return err
	case PostgresRestart:
		p := x.in.pg
		t := time.Now()
		if err := p.stop(hctx, "fast"); err != nil {
			return err
		}
		stopS := time.Since(t).Seconds()
		time.Sleep(f.Pause)
		t2 := time.Now()
		err := p.start(hctx)
		f.Detail = fmt.Sprintf("pg_ctl stop -m fast (%.1fs), %.1fs pause, pg_ctl start (%.1fs): %.1fs down",
			stopS, f.Pause.Seconds(), time.Since(t2).Seconds(), time.Since(t).Seconds())
		return err
	case PostgresTerminate:
		p := x.in.pg
		tctx, cancel := context.WithTimeout(hctx, 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(tctx, p.url())
		if err != nil {
			return err
		}
		defer conn.Close(context.WithoutCancel(tctx))
		var n int
		if err := conn.QueryRow(tctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
			FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, x.dbName).Scan(&n); err != nil {
			return err
		}
		f.Detail = fmt.Sprintf("pg_terminate_backend: %d backends on %s", n, x.dbName)
		return nil
	}
	return fmt.Errorf("unknown infra fault %q", f.Kind)
}

// Heal makes sure every private instance is up: the PostgreSQL cluster answers, redis-server runs,
// the RabbitMQ node accepts AMQP (start_app otherwise).
func (x infraFaults) Heal(ctx context.Context) error {
	var errs []error
	if p := x.in.pg; p != nil && !p.up(ctx) {
		if err := p.start(ctx); err != nil {
			errs = append(errs, fmt.Errorf("start the private PostgreSQL: %w", err))
		}
	}
	if r := x.in.redis; r != nil && !r.running() {
		if err := r.start(ctx); err != nil {
			errs = append(errs, fmt.Errorf("start the private Redis: %w", err))
		}
	}
	if r := x.in.rabbit; r != nil && !r.Up(ctx) {
		if _, err := r.Ctl(ctx, "start_app"); err != nil {
			errs = append(errs, fmt.Errorf("start_app on the private RabbitMQ: %w", err))
		}
	}
	return errors.Join(errs...)
}
