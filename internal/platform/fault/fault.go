// Package fault is the one crash-fault scheme of the lab and the end-to-end tests. A flow names each
// of its crash windows with a Point, spelled "crash-<after what>" (pay: crash-after-claim,
// crash-after-rpc, crash-before-write; points-consumer: crash-after-claim, crash-after-commit), and
// calls its Hook there. Production passes a nil Hook, which does nothing.
//
// Kill arms one point of a real process (PAY_FAULT, POINTS_FAULT; lab mode only): reached, the process
// dies by SIGKILL, as after kill -9 or an OOM kill, so no deferred call, ack, release or close runs.
// Tests that pause or end a flow in-process build their Hook with On.
package fault

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"syscall"
)

// Point names a crash window of one flow: "crash-after-claim", "crash-before-write", ...
type Point string

// Hook is called at every crash point a flow passes. A nil Hook does nothing.
type Hook func(ctx context.Context, p Point)

// At runs h at p.
func (h Hook) At(ctx context.Context, p Point) {
	if h != nil {
		h(ctx, p)
	}
}

// On returns a Hook that runs do[p] at each point p that has an entry and ignores the others.
func On(do map[Point]func(ctx context.Context)) Hook {
	return func(ctx context.Context, p Point) {
		if f := do[p]; f != nil {
			f(ctx)
		}
	}
}

// Kill returns a Hook that kills this process with SIGKILL when it reaches armed, which must be one of
// the flow's known points; an empty armed returns a nil Hook (no faults). variable names the setting
// for the error ("PAY_FAULT"). An armed hook is announced at once with "LAB FAULT ARMED".
func Kill(variable string, armed Point, known []Point, logger *slog.Logger) (Hook, error) {
	if armed == "" {
		return nil, nil
	}
	if !slices.Contains(known, armed) {
		return nil, fmt.Errorf("%s %q: want one of %v", variable, armed, known)
	}
	logger.Warn("LAB FAULT ARMED: this process kills itself with SIGKILL at a crash point", "fault", string(armed))
	return func(_ context.Context, p Point) {
		if p != armed {
			return
		}
		logger.Warn("LAB FAULT: crashing now", "fault", string(p))
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		os.Exit(137) // not reached on Linux; the conventional "killed" status elsewhere
	}, nil
}
