package lab

import (
	"context"
	"fmt"

	"idemshop/internal/points"
)

// runS11: points-consumer claims the order in Redis, then crashes before its commit; the broker
// redelivers. Unsafe: points.ClaimFirst, whose claim is the final "done" (SET NX, no lease), so
// the redelivery takes the order for credited and acks it. Guarded: the real consumer, whose claim is a
// lease that runs out; the redelivery waits for it and credits once. The crash harness is in s6.go.
func runS11(ctx context.Context, env *Env) (Unsafe, Guarded, error) {
	var u Unsafe
	var g Guarded
	m, err := runConsumerCrash(ctx, env, SideName("S11", true), points.ClaimFirst, points.CrashAfterClaim)
	if err != nil {
		return u, g, fmt.Errorf("S11 unsafe: %w", err)
	}
	per := m["points_per_order"]
	u.Measured = m
	// Lost for good: the redelivery was acked ("duplicate"), nothing is left in the queue or the DLQ to
	// retry, and the ledger has nothing for the order.
	u.Reproduced = m["marker_done_after_crash"] == 1 && m["redelivery_duplicate"] == 1 &&
		m["queue_ready"] == 0 && m["dlq_ready"] == 0 && m["ledger_rows"] == 0 && m["balance"] == 0
	u.Detail = fmt.Sprintf("crash after the claim left \"done\" and %d ledger rows; the redelivery was acked as a duplicate: %d ledger rows, balance %d, %d points lost",
		m["ledger_rows_after_crash"], m["ledger_rows"], m["balance"], per-m["balance"])

	m, err = runConsumerCrash(ctx, env, SideName("S11", false), points.Guarded, points.CrashAfterClaim)
	if err != nil {
		return u, g, fmt.Errorf("S11 guarded: %w", err)
	}
	g.Measured = m
	g.OK = m["ledger_rows_after_crash"] == 0 && m["marker_done_after_crash"] == 0 &&
		m["redelivery_applied"] == 1 && m["queue_ready"] == 0 && m["dlq_ready"] == 0 &&
		m["ledger_rows"] == 1 && m["balance"] == per
	g.Detail = fmt.Sprintf("crash after the claim (%d ledger rows); the redelivery waited out the %s lease and credited once (%d ms): %d ledger row, balance %d",
		m["ledger_rows_after_crash"], consumerLeaseTTL, m["redelivery_ms"], m["ledger_rows"], m["balance"])
	return u, g, nil
}
