package points

import (
	"fmt"
	"log/slog"
	"os"
	"syscall"
)

// FaultPoint names a crash window of the consumer, for the lab (lab S6 and S11, docs/design.md).
type FaultPoint string

const (
	// FaultAfterClaim is after the Redis claim, before the database commit (S11): the lease must
	// expire and the redelivery credit the order exactly once.
	FaultAfterClaim FaultPoint = "exit-after-claim"
	// FaultAfterCommit is after the database commit, before the lease is marked done and the message
	// acked (S6): the redelivery must be acked without a second credit.
	FaultAfterCommit FaultPoint = "exit-after-commit"
)

// LabFault returns a ConsumerConfig.Fault hook that kills the process with SIGKILL when it reaches
// point: no deferred call runs, no ack or close goes out, exactly like a kill -9 or an OOM kill at
// that line. It is the only crash hook in the package and cmd/points-consumer wires it only when
// ORDERS_LAB=true and POINTS_FAULT names a point.
func LabFault(point FaultPoint, logger *slog.Logger) (func(FaultPoint), error) {
	if point != FaultAfterClaim && point != FaultAfterCommit {
		return nil, fmt.Errorf("points: unknown fault point %q", point)
	}
	logger.Warn("LAB FAULT ARMED: this process kills itself with SIGKILL at a crash point",
		"fault", string(point))
	return func(p FaultPoint) {
		if p != point {
			return
		}
		logger.Warn("LAB FAULT: crashing now", "fault", string(p))
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		os.Exit(137) // not reached on Linux; the conventional "killed" status elsewhere
	}, nil
}
