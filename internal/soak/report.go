package soak

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
)

// maxListed is how many violations the report lists; the count is always there.
const maxListed = 20

// Report is what a soak run found. The text form (Print) and the JSON form carry the same facts.
type Report struct {
	Seed        uint64  `json:"seed"`
	SeedRandom  bool    `json:"seed_random"`
	RunID       string  `json:"run_id"`
	Faults      string  `json:"faults"`
	Chaos       bool    `json:"chaos"`
	DurationS   float64 `json:"duration_s"`
	Clients     int     `json:"clients"`
	Interrupted bool    `json:"interrupted,omitempty"`

	OrdersCreated int            `json:"orders_created"`
	OrderStatuses map[string]int `json:"order_statuses"` // the shop's, at the last check
	Payments      int            `json:"payments"`       // at the platform
	PaymentStatus map[string]int `json:"payment_statuses"`
	Refunds       int            `json:"refunds"`            // at the platform (0 when it cannot list them)
	BackOffice    map[string]int `json:"backoffice_refunds"` // by kind: full, split, partial
	ShopRefunds   map[string]int `json:"shop_refunds"`       // the shop's own refund requests, by reason
	RefundRefused map[string]int `json:"refunds_refused,omitempty"`
	ClientOutcome map[string]int `json:"client_outcomes"`

	ChaosUsed []ChaosChange  `json:"chaos_settings"`
	Injected  []Fault        `json:"faults_injected"`            // every fault fired, with its recovery (or why it was not injected)
	ByKind    map[string]int `json:"faults_by_kind"`             // the faults injected, by kind
	NotFired  []Fault        `json:"faults_not_fired,omitempty"` // planned, but the run ended first
	// Infra is the private PostgreSQL, Redis and RabbitMQ of an infra soak.
	Infra *InfraInfo `json:"infra,omitempty"`
	// ProbeOrders is the orders the recovery probes created (besides the clients' OrdersCreated).
	ProbeOrders int `json:"probe_orders,omitempty"`
	// OutsideErrors is the clients' non-2xx answers outside every fault window during the run (chaos
	// alone), over OutsideS seconds: the baseline to compare a fault window's errors with.
	OutsideErrors map[string]int `json:"client_errors_outside_faults,omitempty"`
	OutsideS      float64        `json:"outside_faults_s,omitempty"`
	// AfterErrors is the clients' non-2xx answers after the run's end outside every fault window: the
	// requests in flight when the clients stopped. ClientErrors counts them too.
	AfterErrors map[string]int `json:"client_errors_after_run,omitempty"`

	ClientErrors map[string]int `json:"client_errors"`         // by status code ("conn": no answer)
	ErrorsByCode map[string]int `json:"client_errors_by_code"` // by status and problem code

	Converged       bool    `json:"converged"`
	ConvergeSeconds float64 `json:"converge_s"` // from the faults' stop to the first passing check; -1 if none
	ConvergeLimitS  float64 `json:"converge_limit_s"`
	Checks          int     `json:"checks"` // convergence checks run

	Violations     []Violation    `json:"violations"` // the first 20
	ViolationCount int            `json:"violation_count"`
	ByCheck        map[string]int `json:"violations_by_check"` // all of them, by rule

	// ServiceLogs is each service's ERROR lines and ALERTs, counted before a passing run's logs are
	// deleted: an ERROR outside a fault window, and any ALERT, is worth reading (docs/reliability.md).
	ServiceLogs map[string]LogCount `json:"service_logs,omitempty"`

	Notes []string `json:"notes,omitempty"`
	Logs  string   `json:"logs,omitempty"` // the services' logs, kept when the run failed
}

// LogCount is what one service logged at ERROR during a run, and its ALERT lines by alert name.
type LogCount struct {
	Errors int            `json:"errors"`
	Alerts map[string]int `json:"alerts,omitempty"`
}

// OK is true when the shop converged with no violation.
func (r *Report) OK() bool { return r.Converged && r.ViolationCount == 0 }

// JSON writes the report as one JSON object.
func (r *Report) JSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Print writes the text report, at most 100 columns wide.
func (r *Report) Print(w io.Writer) {
	const width = 100
	line := func(label, text string) {
		// A text that starts with spaces is a sub-line: its continuation lines keep that indent.
		indent := len(text) - len(strings.TrimLeft(text, " "))
		for i, l := range wrap(strings.TrimLeft(text, " "), width-14-indent) {
			if i > 0 {
				label = ""
			}
			fmt.Fprintf(w, "%-13s %s%s\n", label, strings.Repeat(" ", indent), l)
		}
	}
	seed := fmt.Sprint(r.Seed)
	if r.SeedRandom {
		seed += " (random)"
	}
	chaos := "on"
	if !r.Chaos {
		chaos = "off"
	}
	fmt.Fprintf(w, "soak %s\n", r.RunID)
	line("seed", fmt.Sprintf("%s  (replay: SOAK_SEED=%d SOAK_DURATION=%gs SOAK_FAULTS=%s)", seed, r.Seed, r.DurationS, r.Faults))
	line("run", fmt.Sprintf("%gs, %d clients, faults %s, chaos %s", r.DurationS, r.Clients, r.Faults, chaos))
	created := fmt.Sprintf("%d created", r.OrdersCreated)
	if r.ProbeOrders > 0 {
		// The shop's and the platform's totals count the probes' orders too.
		created = fmt.Sprintf("%d created (+%d by the recovery probes)", r.OrdersCreated, r.ProbeOrders)
	}
	line("orders", fmt.Sprintf("%s; shop: %s", created, counts(r.OrderStatuses)))
	line("payments", fmt.Sprintf("%d at the platform: %s", r.Payments, counts(r.PaymentStatus)))
	refunds := fmt.Sprintf("%d at the platform; back-office: %s; shop: %s", r.Refunds, counts(r.BackOffice), counts(r.ShopRefunds))
	if len(r.RefundRefused) > 0 {
		refunds += "; refused: " + counts(r.RefundRefused)
	}
	line("refunds", refunds)
	line("clients", counts(r.ClientOutcome))
	if len(r.ChaosUsed) == 0 {
		line("chaos", "none")
	}
	for i, c := range r.ChaosUsed {
		label := ""
		if i == 0 {
			label = "chaos"
		}
		s := fmt.Sprintf("t=%5.1fs %s", c.AtSeconds, c.Settings)
		if c.Error != "" {
			s += " ERROR " + c.Error
		}
		line(label, s)
	}
	if in := r.Infra; in != nil {
		for _, svc := range []string{svcPostgres, svcRedis, svcRabbit} {
			if d, ok := in.Instances[svc]; ok {
				line("infra", fmt.Sprintf("private %s %s, started in %.1fs", svc, d, in.StartS[svc]))
			} else {
				line("infra", fmt.Sprintf("NO private %s (%s): its faults are NOT injected; the shop used the shared %s",
					svc, in.Missing[svc], in.Shared[svc]))
			}
		}
	}
	faults := "none"
	if len(r.Injected) > 0 {
		var at []string
		for _, f := range r.Injected {
			s := fmt.Sprintf("%s@%.1fs+%.1fs", f.Kind, f.AtS, f.PauseS)
			if f.NotInjected != "" {
				s += " NOT INJECTED"
			} else if f.Error != "" {
				s += " ERROR"
			}
			at = append(at, s)
		}
		faults = counts(r.ByKind) + ": " + strings.Join(at, ", ")
	}
	// Planned beside fired, so that "every planned fault fired" is read, not inferred from a missing
	// "not fired" line (a soak runner's wish, 2026-12-08).
	line("faults", fmt.Sprintf("%d planned, %d fired; %s", len(r.Injected)+len(r.NotFired), len(r.Injected), faults))
	for _, f := range r.Injected {
		r.printFault(line, f)
	}
	if len(r.NotFired) > 0 {
		var nf []string
		for _, f := range r.NotFired {
			nf = append(nf, fmt.Sprintf("%s@%.1fs", f.Kind, f.AtS))
		}
		// Their planned times: faults fire one at a time, each after the recovery of the one before,
		// so these may have been due before faults that fired later (a soak runner's finding, 2026-12-07:
		// "ended before 45.5s" beside a fault fired at 51.4 s).
		line("not fired", "the faults stopped before these, planned at: "+strings.Join(nf, ", "))
	}
	errs := "none"
	if len(r.ClientErrors) > 0 {
		errs = counts(r.ClientErrors) + " (" + counts(r.ErrorsByCode) + ")"
	}
	line("client errors", errs)
	if r.OutsideS > 0 {
		line("", fmt.Sprintf("outside the fault windows (%.0fs of the run): %s", r.OutsideS, counts(r.OutsideErrors)))
	}
	if len(r.AfterErrors) > 0 {
		line("", "after the run's end (requests then in flight): "+counts(r.AfterErrors))
	}
	if r.Interrupted {
		line("converged", "interrupted")
	} else if r.Converged {
		line("converged", fmt.Sprintf("yes, %.1fs after the faults stopped (%s, the last confirming)", r.ConvergeSeconds, plural(r.Checks, "check")))
	} else {
		line("converged", fmt.Sprintf("NO within %gs after the faults stopped (%s)", r.ConvergeLimitS, plural(r.Checks, "check")))
	}
	if r.ViolationCount == 0 {
		line("violations", "0")
	} else {
		line("violations", fmt.Sprintf("%d: %s; the first %d:", r.ViolationCount, counts(r.ByCheck), min(r.ViolationCount, maxListed)))
		for _, v := range r.Violations {
			for i, l := range wrap(v.String(), width-6) {
				if i == 0 {
					fmt.Fprintf(w, "  - %s\n", l)
				} else {
					fmt.Fprintf(w, "      %s\n", l)
				}
			}
		}
	}
	if len(r.ServiceLogs) > 0 {
		var parts []string
		for _, svc := range serviceNames {
			c, ok := r.ServiceLogs[svc]
			if !ok {
				continue
			}
			part := fmt.Sprintf("%s %d ERROR", svc, c.Errors)
			if len(c.Alerts) > 0 {
				part += ", ALERT " + counts(c.Alerts)
			}
			parts = append(parts, part)
		}
		line("log lines", strings.Join(parts, "; "))
	}
	for _, n := range r.Notes {
		line("note", n)
	}
	if r.Logs != "" {
		line("logs", r.Logs)
	}
}

// printFault writes one fault's lines: what was done, and how the shop came through it.
func (r *Report) printFault(line func(label, text string), f Fault) {
	head := fmt.Sprintf("%s@%.1fs: ", f.Kind, f.AtS)
	if f.NotInjected != "" {
		line("fault", head+"NOT INJECTED: "+f.NotInjected)
		return
	}
	detail := f.Detail
	if f.Error != "" {
		detail += " ERROR " + f.Error
	}
	line("fault", head+detail)
	rec := f.Recovery
	if rec == nil {
		return
	}
	secs := func(v float64) string {
		if v < 0 {
			return "not within its bound"
		}
		return fmt.Sprintf("%.1fs", v)
	}
	probe := "no probe order"
	if rec.ProbeOrder != 0 {
		probe = fmt.Sprintf("probe order %d paid %s, its points %s", rec.ProbeOrder, secs(rec.ProbeS), secs(rec.PointsS))
	}
	s := fmt.Sprintf("  recovered: healed %s, ready %s, %s", secs(rec.HealedS), secs(rec.ReadyS), probe)
	if rec.ProbeNote != "" {
		s += " (" + rec.ProbeNote + ")"
	}
	line("", s)
	if len(rec.Restarted) > 0 {
		line("", "  EXITED BY ITSELF, restarted by the soak: "+strings.Join(rec.Restarted, ", "))
	}
	while := fmt.Sprintf("  while broken: clients served %s", counts(rec.Served))
	if rec.Paid >= 0 {
		while += fmt.Sprintf("; orders paid %d, points rows %d", rec.Paid, rec.Credited)
	}
	line("", while)
	line("", "  /readyz orders: "+counts(rec.OrdersReady)+"; points-consumer: "+counts(rec.PointsReady))
	line("", fmt.Sprintf("  clients saw in the %.1fs window: %s", rec.WindowS, counts(rec.Errors)))
}

// counts renders a map as "k1 n1, k2 n2" in key order.
func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// wrap breaks s into lines of at most width runes, at spaces where it can.
func wrap(s string, width int) []string {
	var out []string
	for len([]rune(s)) > width {
		r := []rune(s)
		cut := width
		for i := width; i > width/2; i-- {
			if r[i] == ' ' {
				cut = i
				break
			}
		}
		out = append(out, strings.TrimRight(string(r[:cut]), " "))
		s = strings.TrimLeft(string(r[cut:]), " ")
	}
	return append(out, s)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
