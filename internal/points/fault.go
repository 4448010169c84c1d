package points

import "idemshop/internal/platform/fault"

// The consumer's crash windows (internal/platform/fault), for the lab (S6, S11) and the end-to-end
// tests. cmd/points-consumer arms one with POINTS_FAULT, and only with ORDERS_LAB=true.
const (
	// CrashAfterClaim is after the Redis claim, before the database commit (S11): the lease must
	// expire and the redelivery credit the order exactly once.
	CrashAfterClaim fault.Point = "crash-after-claim"
	// CrashAfterCommit is after the database commit, before the lease is marked done and the message
	// acked (S6): the redelivery must be acked without a second credit.
	CrashAfterCommit fault.Point = "crash-after-commit"
)

// Points are the consumer's crash windows, in order.
var Points = []fault.Point{CrashAfterClaim, CrashAfterCommit}
