package testenv

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"idemshop/internal/mutants"
	"idemshop/internal/platform/freeport"
)

// Output collects a child process's stdout and stderr. exec copies into it from its own goroutine, so
// reads and writes are locked.
type Output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

// String returns everything written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// Contains reports whether s has been written.
func (o *Output) Contains(s string) bool { return strings.Contains(o.String(), s) }

// FreeAddr returns a 127.0.0.1 address with a port nothing listens on right now, for a process the
// test starts to bind: from below the kernel's ephemeral range (freeport), where no outgoing connection
// of the suite's can take it first, as one did to a soak's port (2026-12-06).
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return addr
}

// SilentListener returns the 127.0.0.1 address of a listener that accepts every connection and never
// answers, as a paused server or a black hole in between would; it closes with the test.
func SilentListener(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: silent listener: %v", err)
	}
	var mu sync.Mutex
	var held []net.Conn // open, never answered
	closed := false
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		closed = true
		for _, c := range held {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				_ = c.Close()
			} else {
				held = append(held, c)
			}
			mu.Unlock()
		}
	}()
	return l.Addr().String()
}

var (
	buildMu  sync.Mutex
	built    = map[string]string{}
	buildDir string
)

// Build compiles the main package pkg (an import path such as "idemshop/cmd/orders") once per test
// process and returns the binary's path. End-to-end tests run the real binaries, so that kill -9 and
// SIGTERM are real.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if bin, ok := built[pkg]; ok {
		return bin
	}
	if buildDir == "" {
		dir, err := os.MkdirTemp("", "idemshop-test-bin-")
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		buildDir = dir
	}
	bin := filepath.Join(buildDir, filepath.Base(pkg))
	args := []string{"build", "-o", bin}
	// Under `make mutants`, with the mutant's overlay: the binary runs the mutated code, as the test does,
	// built with the test binary's flags, so that it links the packages that build compiled.
	if overlay := os.Getenv(mutants.OverlayEnv); overlay != "" {
		args = append(append(args, "-overlay", overlay), mutants.BuildFlags...)
	}
	if out, err := exec.Command("go", append(args, pkg)...).CombinedOutput(); err != nil {
		t.Fatalf("testenv: go build %s: %v\n%s", pkg, err, out)
	}
	built[pkg] = bin
	return bin
}

// WaitReady polls base+"/readyz" until it answers 200, or fails the test after within, showing out.
func WaitReady(t testing.TB, base string, within time.Duration, out *Output) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if resp, err := http.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: %s never became ready within %s; output:\n%s", base, within, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
