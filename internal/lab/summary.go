package lab

import "fmt"

// Verdicts of Summary.Verdict.
const (
	VerdictPass  = "pass"  // the unsafe side showed its failure (or has no twin) and the guarded side held
	VerdictFail  = "FAIL"  // one side did not do what the table says
	VerdictError = "ERROR" // the scenario could not run to the end: nothing was measured for sure
)

// NoTwinFigure is what a summary shows on the unsafe side of a scenario without an unsafe variant.
const NoTwinFigure = "— (no twin)"

// Summary is a scenario's line of the short report (`loadtest lab` without --wide): a short title and,
// per side, the two or three figures a trainer points at ("3 applied" against "1 applied"), each a few
// dozen characters, so that a line fits a projector's 100 columns. The full sentences stay in
// Side.Detail (--wide, --json).
type Summary struct {
	ID, Short, Verdict string
	Unsafe, Guarded    string
}

// summarizer is one scenario's short title and figures. The figures read Measured, whose keys are the
// scenario's own (s1.go ... s12.go): a key a scenario stops writing reads as 0, and TestSummaries
// renders every scenario's real results to catch that.
type summarizer struct {
	short   string
	figures func(u, g map[string]int64) (unsafe, guarded string)
}

var summarizers = map[string]summarizer{
	"S1": {"triple + forged", func(u, g map[string]int64) (string, string) {
		f := func(m map[string]int64) string {
			return fmt.Sprintf("%d applied, stock %+d, points %+d", m["applied"], m["stock_delta"], m["points_delta"])
		}
		guarded := f(g)
		// The forged copies are the guarded side's alone; one that got through is what broke.
		if taken := g["forged_sent"] - g["forged_refused"]; taken > 0 || g["moved_by_forged"] > 0 {
			guarded = fmt.Sprintf("%d of %d forged taken, %d moved", taken, g["forged_sent"], g["moved_by_forged"])
		}
		return f(u), guarded
	}},
	"S2": {"double submit", func(u, g map[string]int64) (string, string) {
		replayed := ""
		if g["replayed"] == 1 {
			replayed = ", replayed"
		}
		return fmt.Sprintf("%s for one key", count(u["orders"], "order")),
			fmt.Sprintf("%s, %d×409 in use%s", count(g["orders"], "order"), g["answers_409"], replayed)
	}},
	"S3": {"key, then failure", func(u, g map[string]int64) (string, string) {
		return fmt.Sprintf("key stuck, %s refused", count(u["retries_blocked"], "retry")),
			fmt.Sprintf("rolled back, retry %d, %s", g["retry_status"], count(g["orders"], "order"))
	}},
	"S4": {"token then failure", func(u, g map[string]int64) (string, string) {
		return fmt.Sprintf("resubmit %d: %s", u["resubmit_status"], count(u["coupons"], "coupon")),
			fmt.Sprintf("resubmit %d: %s, %s", g["resubmit_status"], count(g["coupons"], "coupon"), count(g["debits"], "debit"))
	}},
	"S5": {"flash-sale lock", func(u, g map[string]int64) (string, string) {
		f := func(m map[string]int64) string {
			return fmt.Sprintf("stock %d: %d PAID for %d units", m["stock_final"], m["paid"], m["initial_stock"])
		}
		return f(u), f(g)
	}},
	"S6": {"crash before ack", ledgerFigures},
	"S7": {"pay RPC, no record", func(u, g map[string]int64) (string, string) {
		// The guarded retry's status is the guard's first proof (409 while the lease runs); the creates
		// are what the platform was asked, which one payment there cannot show.
		return fmt.Sprintf("%s, %s, %d cents", count(u["create_requests"], "create"), count(u["payments"], "payment"), u["charged_cents"]),
			fmt.Sprintf("retry %d, %s, %s", g["retry_status"], count(g["create_requests"], "create"), count(g["payments"], "payment"))
	}},
	"S8": {"stale holder", func(u, g map[string]int64) (string, string) {
		// Read from what happened, not from the side: a guarded shop that let A through says so.
		f := func(m map[string]int64) string {
			switch {
			case m["late_write_rejected"] == 1 && m["stored_is_b"] == 1:
				return fmt.Sprintf("A (fence %d) refused, B (%d) kept", m["fence_a"], m["fence_b"])
			case m["stored_is_a"] == 1:
				return fmt.Sprintf("A (fence %d) overwrote B (%d)", m["fence_a"], m["fence_b"])
			case m["late_write_rejected"] == 1:
				return fmt.Sprintf("A (fence %d) refused, B (%d) lost", m["fence_a"], m["fence_b"])
			}
			return fmt.Sprintf("A (fence %d) accepted, B (%d) lost", m["fence_a"], m["fence_b"])
		}
		return f(u), f(g)
	}},
	"S9": {"Redis down", func(_, g map[string]int64) (string, string) {
		// The latency is in the details: it is noisy (with 60 requests, p50 has been faster with Redis
		// down than up), and the point is exactly once without the efficiency layer.
		// A storm that broke is named with its own figures: the lab's Redis-down replica held while the
		// orders under test did not read "20 of 20 paid once" (a helper's finding, 2026-12-07).
		for _, prefix := range []string{s9Down, s9Up} {
			if len(s9Broken(g, prefix)) == 0 {
				continue
			}
			name := "Redis down"
			if prefix == s9Up {
				name = "Redis up"
			}
			if g[prefix+"status_5xx"] > 0 {
				return NoTwinFigure, fmt.Sprintf("%s: %d 5xx, %d of %d paid", name, g[prefix+"status_5xx"], g[prefix+"paid"], g[prefix+"orders"])
			}
			return NoTwinFigure, fmt.Sprintf("%s: %d applied, stock %+d", name, g[prefix+"applied"], g[prefix+"stock_delta"])
		}
		return NoTwinFigure, fmt.Sprintf("%d of %d paid once, %d 5xx", g["degraded_paid"], g["degraded_orders"], g["degraded_status_5xx"])
	}},
	"S10": {"same key, new body", func(u, g map[string]int64) (string, string) {
		return fmt.Sprintf("body B %d: A's order replayed", u["second_status"]),
			fmt.Sprintf("body B %d: key reused", g["second_status"])
	}},
	"S11": {"claim-first crash", ledgerFigures},
	"S12": {"refund before pay", func(u, g map[string]int64) (string, string) {
		f := func(m map[string]int64) string {
			status := "PENDING"
			switch {
			case m["status_paid"] == 1:
				status = "PAID"
			case m["status_refunded"] == 1:
				status = "REFUNDED"
			}
			return fmt.Sprintf("%s, stock %+d, points %+d", status, m["stock_delta"], m["points_delta"])
		}
		return f(u), f(g)
	}},
}

// ledgerFigures are the consumer scenarios' (S6, S11): credits written against the one credit the order
// is worth.
func ledgerFigures(u, g map[string]int64) (string, string) {
	f := func(m map[string]int64) string {
		return fmt.Sprintf("credits %d, balance %d (want %d)", m["ledger_rows"], m["balance"], m["points_per_order"])
	}
	return f(u), f(g)
}

// Summarize reduces a result to its line of the short report. A scenario that ended in an error shows
// no figures (what it measured before the error may be half a side); one the table does not know (a
// new scenario without a summarizer yet) shows its title and details, which the report cuts to fit.
func Summarize(r Result) Summary {
	s := Summary{ID: r.ID, Short: r.Title, Verdict: VerdictFail, Unsafe: r.Unsafe.Detail, Guarded: r.Guarded.Detail}
	if sm, ok := summarizers[r.ID]; ok {
		s.Short = sm.short
		s.Unsafe, s.Guarded = sm.figures(r.Unsafe.Measured, r.Guarded.Measured)
	}
	if r.Unsafe.NoTwin {
		s.Unsafe = NoTwinFigure
	}
	switch {
	case r.Error != "":
		s.Verdict, s.Unsafe, s.Guarded = VerdictError, "—", "—"
	case r.Passed():
		s.Verdict = VerdictPass
	}
	return s
}

// count is "1 order", "0 orders", "2 retries".
func count(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if noun == "retry" {
		return fmt.Sprintf("%d retries", n)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
