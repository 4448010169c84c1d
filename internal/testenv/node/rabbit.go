package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"idemshop/internal/platform/rabbitmq"
)

// RabbitStartWithin bounds a node's start: a fresh node boots in about 5 s on an idle 2-core machine,
// about 30 s on a busy one.
const RabbitStartWithin = 150 * time.Second

// Rabbit is a RabbitMQ node of its own: its node name, AMQP and distribution ports, Erlang
// cookie (HOME), database, logs, config and an empty plugin list, all in dir. rabbitmqctl reaches it
// with -n and the same environment. The node runs as its caller's user (root included): the Debian
// wrapper, which switches to the rabbitmq user, is bypassed.
type Rabbit struct {
	// Node is the Erlang node name (name@localhost); Port and DistPort its AMQP and distribution ports.
	Node           string
	Port, DistPort int
	// CtlDistPort is the one port rabbitmqctl listens on while it talks to this node (Erlang
	// distribution needs the client to listen too). Without it the CLI takes 35672–35682, inside the
	// kernel's ephemeral range, where an outgoing connection can hold it (a soak runner's finding,
	// 2026-12-07; freeport says why ports come from below that range).
	CtlDistPort int

	server, ctlBin string
	dir            string
	env            []string

	// ctlMu: one rabbitmqctl at a time, since they all listen on CtlDistPort.
	ctlMu sync.Mutex
	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{}
}

// rabbitBin finds a RabbitMQ script: Debian's real one under /usr/lib/rabbitmq/bin, else PATH.
func rabbitBin(name string) (string, error) {
	if p := filepath.Join("/usr/lib/rabbitmq/bin", name); IsExec(p) {
		return p, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s not found (neither /usr/lib/rabbitmq/bin nor PATH): install the RabbitMQ server package", name)
}

// NewRabbit prepares a node named name (name@localhost) in dir: three free ports (AMQP, distribution,
// rabbitmqctl's), a fresh Erlang cookie, its config files. Start runs it. Errors: no rabbitmq-server
// or rabbitmqctl, dir not writable, no free port.
func NewRabbit(dir, name string) (*Rabbit, error) {
	server, err := rabbitBin("rabbitmq-server")
	if err != nil {
		return nil, err
	}
	ctl, err := rabbitBin("rabbitmqctl")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r := &Rabbit{server: server, ctlBin: ctl, dir: dir, Node: name}
	if r.Port, err = FreePort(); err != nil {
		return nil, err
	}
	if r.DistPort, err = FreePort(); err != nil {
		return nil, err
	}
	if r.CtlDistPort, err = FreePort(); err != nil {
		return nil, err
	}
	var cookie [20]byte
	_, _ = rand.Read(cookie[:])
	files := map[string]string{
		"enabled_plugins":   "",
		"rabbitmq-env.conf": "", // not /etc/rabbitmq's: it names the machine's node
		"rabbitmq.conf": fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\nloopback_users = none\n", r.Port) +
			"log.console = false\nlog.file.level = info\n",
		".erlang.cookie": strings.ToUpper(hex.EncodeToString(cookie[:])),
	}
	for name, body := range files {
		mode := os.FileMode(0o644)
		if name == ".erlang.cookie" {
			mode = 0o400
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), mode); err != nil {
			return nil, err
		}
	}
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RABBITMQ_") && !strings.HasPrefix(kv, "ERL_") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	r.env = append(env,
		"HOME="+dir, // the Erlang cookie of this node and its rabbitmqctl
		"RABBITMQ_NODENAME="+name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(r.Port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(r.DistPort),
		"RABBITMQ_CTL_DIST_PORT_MIN="+strconv.Itoa(r.CtlDistPort),
		"RABBITMQ_CTL_DIST_PORT_MAX="+strconv.Itoa(r.CtlDistPort),
		// ... on loopback, as the node: left alone, it listened on 0.0.0.0 (a soak runner's finding).
		"RABBITMQ_CTL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "rabbitmq.pid"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(dir, "advanced.config"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "rabbitmq-env.conf"),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
	)
	return r, nil
}

// URL is the node's AMQP URL (guest/guest).
func (r *Rabbit) URL() string { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", r.Port) }

// Start runs rabbitmq-server in the foreground (its own process group) and waits until an AMQP
// connection opens.
func (r *Rabbit) Start(ctx context.Context) error {
	out, err := os.OpenFile(filepath.Join(r.dir, "rabbitmq-server.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(r.server)
	cmd.Env = r.env
	cmd.Dir = r.dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	r.mu.Lock()
	if err := cmd.Start(); err != nil {
		r.mu.Unlock()
		_ = out.Close()
		return fmt.Errorf("start rabbitmq-server: %w", err)
	}
	done := make(chan struct{})
	r.cmd, r.done = cmd, done
	r.mu.Unlock()
	_ = os.WriteFile(filepath.Join(r.dir, "launcher.pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
	go func() { _ = cmd.Wait(); _ = out.Close(); close(done) }()

	deadline := time.Now().Add(RabbitStartWithin)
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := rabbitmq.Ping(pctx, r.URL())
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("rabbitmq-server exited at start: %s", Tail(filepath.Join(r.dir, "rabbitmq-server.out"), 8))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("RabbitMQ node %s not accepting AMQP within %s", r.Node, RabbitStartWithin)
		}
	}
}

// Ctl runs rabbitmqctl -n <node> args... with the node's environment (its cookie).
func (r *Rabbit) Ctl(ctx context.Context, args ...string) (string, error) {
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	return RunCmd(ctx, CtlWithin, r.env, r.ctlBin, append([]string{"-n", r.Node}, args...)...)
}

// Up reports whether an AMQP connection opens.
func (r *Rabbit) Up(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return rabbitmq.Ping(ctx, r.URL()) == nil
}

// Stop is rabbitmqctl stop, then SIGKILL of the process group if the node is still there.
func (r *Rabbit) Stop() error {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	_, err := r.Ctl(context.Background(), "stop")
	select {
	case <-done:
		return nil
	case <-time.After(15 * time.Second):
	}
	r.Kill()
	if err != nil {
		return fmt.Errorf("RabbitMQ node %s: %w (killed)", r.Node, err)
	}
	return nil
}

// MemoryAlarm raises (on) or clears a memory alarm on the node, as its own memory monitor would:
// every publishing connection is blocked (connection.blocked) until it clears. Raised directly, so
// that it lasts as long as the caller wants whatever the node's memory; each call costs rabbitmqctl's
// own start, 1-2 s.
func (r *Rabbit) MemoryAlarm(ctx context.Context, on bool) error {
	expr := "rabbit_alarm:clear_alarm({resource_limit, memory, node()})."
	if on {
		expr = "rabbit_alarm:set_alarm({{resource_limit, memory, node()}, []})."
	}
	_, err := r.Ctl(ctx, "eval", expr)
	return err
}

// Kill ends the node at once: SIGKILL to its process group (the launcher and the Erlang VM), for a
// node whose data nobody keeps (a test's: `rabbitmqctl stop` costs seconds, a CLI VM's start and a
// clean shutdown).
func (r *Rabbit) Kill() {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	KillRabbit(r.dir) // the VM, should it have left the group
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
}

// KillRabbit SIGKILLs what still runs of a node started in dir (its Erlang VM and its launcher, each
// found by the pid it left there and checked by its command line). The VM is not the launcher's child
// for long: it outlives a parent that died (the launcher's Pdeathsig does not reach it), so a process
// that is killed leaves its node running until something calls this.
func KillRabbit(dir string) {
	for _, pf := range []struct{ file, want string }{
		{filepath.Join(dir, "rabbitmq.pid"), "beam"},
		{filepath.Join(dir, "launcher.pid"), "rabbitmq"},
	} {
		if pid := PIDFrom(pf.file); pid > 0 && CmdlineHas(pid, pf.want) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// testDirPrefix names the directory of every test's node under os.TempDir(), so that the next test's
// sweep finds the nodes of test processes that died (a test timeout's panic, a kill -9).
const testDirPrefix = "idemshop-test-rabbit-"

// StartRabbit starts a RabbitMQ node for t in a directory of its own and kills it when t ends. It
// fails t when the node does not start (rabbitmq-server missing, or not up within RabbitStartWithin).
// It first stops and removes the nodes that test processes no longer running left behind.
func StartRabbit(t testing.TB) *Rabbit {
	t.Helper()
	sweepDeadTestNodes()
	dir, err := os.MkdirTemp("", testDirPrefix)
	if err != nil {
		t.Fatalf("private RabbitMQ node: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatalf("private RabbitMQ node: %v", err)
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	r, err := NewRabbit(dir, fmt.Sprintf("idemshop_test_%d_%s@localhost", os.Getpid(), hex.EncodeToString(id[:])))
	if err != nil {
		t.Fatalf("private RabbitMQ node: %v", err)
	}
	t.Cleanup(func() {
		r.Kill()
		_ = os.RemoveAll(dir)
	})
	ctx, cancel := context.WithTimeout(context.Background(), RabbitStartWithin)
	defer cancel()
	if err := r.Start(ctx); err != nil {
		t.Fatalf("private RabbitMQ node: %v; its output: %s", err, Tail(filepath.Join(r.dir, "rabbitmq-server.out"), 8))
	}
	return r
}

// sweepDeadTestNodes stops and removes the test nodes whose owner (the test process that started
// them) is gone. A directory without its owner.pid yet is being created: left alone for 2 minutes.
func sweepDeadTestNodes() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), testDirPrefix+"*"))
	for _, d := range dirs[:min(len(dirs), 100)] {
		pid := PIDFrom(filepath.Join(d, "owner.pid"))
		if pid > 0 && Alive(pid) {
			continue
		}
		if st, err := os.Stat(d); pid == 0 && (err != nil || time.Since(st.ModTime()) < 2*time.Minute) {
			continue
		}
		KillRabbit(d)
		_ = os.RemoveAll(d)
	}
}
