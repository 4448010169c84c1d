// Package node runs service nodes of their own (RabbitMQ here) for the soak's infra faults and for the
// tests that must break a service for everyone on it (a RabbitMQ resource alarm is node-wide), and the
// helpers that manage such processes: the machine's shared services, which other tests use at the same
// time, are never stopped, restarted or alarmed.
package node

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"idemshop/internal/platform/freeport"
)

// CtlWithin bounds one control command (rabbitmqctl, pg_ctl).
const CtlWithin = 60 * time.Second

// FreePort is a loopback port nothing listens on right now.
func FreePort() (int, error) {
	a, err := freeport.Addr()
	if err != nil {
		return 0, err
	}
	_, p, _ := net.SplitHostPort(a)
	return strconv.Atoi(p)
}

// RunCmd runs one command, bounded by within, and returns its combined output; its error names the
// command and ends with the output's last lines.
func RunCmd(ctx context.Context, within time.Duration, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	s := strings.TrimSpace(string(out))
	if err != nil {
		return s, fmt.Errorf("%s %s: %w: %s", filepath.Base(name), strings.Join(args, " "), err, lastLines(s, 5))
	}
	return s, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// IsExec reports whether p is an executable file.
func IsExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// Tail returns the last n lines of the file at path (best effort).
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// PIDFrom reads the first line of a pid file (0 if none).
func PIDFrom(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// Alive reports whether a process with this pid exists.
func Alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// CmdlineHas reports whether the command line of process pid contains s: a pid read from a file is
// checked this way before it is signalled, since the pid may have been reused.
func CmdlineHas(pid int, s string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), s)
}
