package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idemshop/internal/soak"
	"idemshop/internal/testenv"
)

// TestSoakConvergesShort is the CI soak: `loadtest soak` with a fixed seed for 15 s (chaos and
// kill -9 of orders and points-consumer), as real processes; the shop must converge with no violation.
func TestSoakConvergesShort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and soaks the whole stack for 15 s")
	}
	t.Parallel()
	svc := testenv.Find(t)
	var dir string
	for _, pkg := range []string{"cmd/orders", "cmd/payments-mock", "cmd/points-consumer", "loadtest"} {
		dir = filepath.Dir(testenv.Build(t, "idemshop/"+pkg))
	}

	// The convergence bound is a deadline for a failing run, not what is asserted: a shop that converges
	// does so a few seconds after the faults stop, a loaded machine may need longer, and a shop that does
	// not converge fails either way. The context outlasts the bound.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "loadtest"), "soak", "--json")
	// On the deadline, Ctrl-C: the soak then removes its processes, database, queues and keys.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+svc.PostgresURL, "REDIS_URL="+svc.RedisURL, "AMQP_URL="+svc.AMQPURL,
		"SOAK_SEED=1", "SOAK_DURATION=15s", "SOAK_FAULTS=process", "SOAK_CHAOS=true",
		"SOAK_GRACE=10s", "SOAK_CONVERGE_TIMEOUT=2m", "SOAK_BIN="+dir,
		fmt.Sprintf("SOAK_RUN_ID=soak_test_%d", os.Getpid()), "LOG_LEVEL=warn")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("loadtest soak: %v\n%s", err, stderr.String())
	}

	var rep soak.Report
	if jerr := json.Unmarshal(stdout.Bytes(), &rep); jerr != nil {
		t.Fatalf("loadtest soak: exit %d, no JSON report (%v)\nstdout:\n%s\nstderr:\n%s", code, jerr, stdout.String(), stderr.String())
	}
	var text strings.Builder
	rep.Print(&text)
	t.Logf("loadtest soak: exit %d\n%s", code, text.String())
	if code != 0 || !rep.Converged || rep.ViolationCount != 0 {
		t.Fatalf("the soak with seed 1 did not converge cleanly: exit %d, converged %v, %d violations (report above)",
			code, rep.Converged, rep.ViolationCount)
	}
	// A passing run deletes its logs; their ERROR lines and ALERTs are counted first.
	for _, svc := range []string{"orders", "payments-mock", "points-consumer"} {
		if _, ok := rep.ServiceLogs[svc]; !ok {
			t.Errorf("the report counted no log lines of %s: %+v", svc, rep.ServiceLogs)
		}
	}
}
