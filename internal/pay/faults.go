package pay

import (
	"context"
	"fmt"
	"os"
)

// CrashFaults returns Faults that kill the process (exit status 137, as after kill -9) at point:
// crash-after-claim, crash-after-rpc or crash-before-write. They let the lab and the end-to-end tests
// crash a real process in each window of the pay flow. "" returns no faults.
func CrashFaults(point string) (Faults, error) {
	crash := func(context.Context) { os.Exit(137) }
	switch point {
	case "":
		return Faults{}, nil
	case "crash-after-claim":
		return Faults{AfterClaim: crash}, nil
	case "crash-after-rpc":
		return Faults{AfterRPC: crash}, nil
	case "crash-before-write":
		return Faults{BeforeWrite: crash}, nil
	}
	return Faults{}, fmt.Errorf("PAY_FAULT %q: want crash-after-claim, crash-after-rpc or crash-before-write", point)
}
