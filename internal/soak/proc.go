package soak

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"idemshop/internal/testenv/node"
)

// readyWithin bounds every wait for a (re)started service's /readyz.
const readyWithin = 30 * time.Second

// proc supervises one service process: the soak starts it, may kill -9 it, and restarts it with the
// same binary, environment and address. Its output is appended to one log file across restarts.
type proc struct {
	name    string
	bin     string
	addr    string // 127.0.0.1:port, also the base of /readyz
	env     []string
	logPath string

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{} // closed when the current process has exited
	asked    bool          // the current process's exit was asked for (kill or stop)
	starts   int
	surprise []string // exits nobody asked for
}

// start runs the process and waits (at most readyWithin) for its /readyz.
func (p *proc) start(ctx context.Context) error {
	p.mu.Lock()
	if p.done != nil {
		select {
		case <-p.done:
		default:
			p.mu.Unlock()
			return fmt.Errorf("%s is already running", p.name)
		}
	}
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.mu.Unlock()
		return fmt.Errorf("%s log: %w", p.name, err)
	}
	p.starts++
	fmt.Fprintf(f, "\n===== soak: start #%d of %s at %s =====\n", p.starts, p.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = f, f
	// A process group of its own: a Ctrl-C at the terminal reaches the soak only, which then stops its
	// children itself (and so knows which exits it asked for). Pdeathsig kills a child if the soak
	// itself dies without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		p.mu.Unlock()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.asked = cmd, done, false
	p.mu.Unlock()

	go func() {
		err := cmd.Wait()
		_ = f.Close()
		p.mu.Lock()
		if !p.asked {
			p.surprise = append(p.surprise, fmt.Sprintf("%s exited by itself (%v)", p.name, err))
		}
		p.mu.Unlock()
		close(done)
	}()
	return p.waitReady(ctx, done)
}

func (p *proc) waitReady(ctx context.Context, done <-chan struct{}) error {
	deadline := time.Now().Add(readyWithin)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+"/readyz", nil)
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited before it was ready; its log: %s\n%s", p.name, p.logPath, node.Tail(p.logPath, 15))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within %s; its log: %s\n%s", p.name, readyWithin, p.logPath, node.Tail(p.logPath, 15))
		}
	}
}

// running reports whether the process is alive.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// signal sends sig to the running process and waits up to within for it to exit; it reports whether it
// did. A process that is not running counts as exited.
func (p *proc) signal(sig syscall.Signal, within time.Duration) bool {
	p.mu.Lock()
	if p.cmd == nil || p.done == nil {
		p.mu.Unlock()
		return true
	}
	done := p.done
	select {
	case <-done:
		p.mu.Unlock()
		return true
	default:
	}
	p.asked = true
	_ = p.cmd.Process.Signal(sig)
	p.mu.Unlock()
	select {
	case <-done:
		return true
	case <-time.After(within):
		return false
	}
}

// kill is kill -9: no drain, no deferred cleanup, whatever was in flight is cut.
func (p *proc) kill() error {
	if !p.signal(syscall.SIGKILL, 10*time.Second) {
		return fmt.Errorf("%s did not die after SIGKILL", p.name)
	}
	return nil
}

// stop is a graceful stop (SIGTERM, then SIGKILL after 10 s).
func (p *proc) stop() {
	if !p.signal(syscall.SIGTERM, 10*time.Second) {
		p.signal(syscall.SIGKILL, 5*time.Second)
	}
}

// surprises returns (and forgets) the exits nobody asked for.
func (p *proc) surprises() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.surprise
	p.surprise = nil
	return out
}
