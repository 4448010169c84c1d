package soak

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	osuser "os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"idemshop/internal/platform/redisx"
	"idemshop/internal/testenv/node"
)

// The services the infra faults break. The soak starts a private instance of each (SOAK_FAULTS=infra
// or all) and points the shop at it: the machine's shared PostgreSQL, Redis and RabbitMQ, which other
// tests use at the same time, are never stopped, restarted or disconnected.
const (
	svcPostgres = "postgres"
	svcRedis    = "redis"
	svcRabbit   = "rabbitmq"
)

// Bounds of the private instances' starts and stops.
const (
	pgStartWithin    = 60 * time.Second
	redisStartWithin = 15 * time.Second
)

// infraDirPrefix names every private-infra directory under os.TempDir(): the soak's own cleanup, the
// stale sweep and scripts/soak.sh find them by it.
const infraDirPrefix = "idemshop-soak-infra-"

// InfraDir is the directory of the private instances of run runID.
func InfraDir(runID string) string { return filepath.Join(os.TempDir(), infraDirPrefix+runID) }

// InfraInfo is what the report says about the private instances.
type InfraInfo struct {
	Dir       string             `json:"dir"`
	Instances map[string]string  `json:"instances"`             // service -> address and how it was started
	StartS    map[string]float64 `json:"start_s"`               // service -> seconds its start took
	Missing   map[string]string  `json:"not_private"`           // service -> why it has no private instance (its faults are not injected)
	Shared    map[string]string  `json:"shared_used,omitempty"` // service -> the shared URL the shop used instead
}

// privateInfra is the soak's own PostgreSQL cluster, Redis server and RabbitMQ node, all under one
// temporary directory (InfraDir). down stops them and removes the directory; CleanupInfra does the same
// for a soak that was killed outright.
type privateInfra struct {
	dir    string
	log    *slog.Logger
	pg     *privatePG
	redis  *privateRedis
	rabbit *node.Rabbit
	info   InfraInfo
}

// startInfra starts the three private instances at once. A service whose instance cannot be started
// (a binary is missing, say) is listed in info.Missing and its faults are reported as not injected; the
// error is for a failure to set up at all.
func startInfra(ctx context.Context, runID string, log *slog.Logger) (*privateInfra, error) {
	sweepStaleInfra(log)
	dir := InfraDir(runID)
	if _, err := os.Stat(dir); err == nil {
		for _, e := range CleanupInfra(dir) {
			log.Warn("soak: cleanup of an earlier run's infra", "dir", dir, "err", e)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("private infra directory: %w", err)
	}
	// PostgreSQL runs as the postgres user when the soak is root: it must reach its directory.
	_ = os.Chmod(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, err
	}
	in := &privateInfra{dir: dir, log: log, info: InfraInfo{Dir: dir, Instances: map[string]string{},
		StartS: map[string]float64{}, Missing: map[string]string{}}}

	var mu sync.Mutex
	var wg sync.WaitGroup
	started := func(svc string, t0 time.Time, desc string, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			in.info.Missing[svc] = err.Error()
			log.Warn("soak: no private instance: its faults will not be injected", "service", svc, "err", err)
			return
		}
		in.info.Instances[svc] = desc
		in.info.StartS[svc] = round2(time.Since(t0).Seconds())
	}
	wg.Go(func() {
		t0 := time.Now()
		p, err := newPrivatePG(filepath.Join(dir, svcPostgres))
		if err == nil {
			err = p.init(ctx)
		}
		if err == nil {
			err = p.start(ctx)
		}
		if err == nil {
			mu.Lock()
			in.pg = p
			mu.Unlock()
			started(svcPostgres, t0, fmt.Sprintf("127.0.0.1:%d (initdb + pg_ctl start, %s)", p.port, p.dataDir()), nil)
		} else {
			started(svcPostgres, t0, "", err)
		}
	})
	wg.Go(func() {
		t0 := time.Now()
		r, err := newPrivateRedis(filepath.Join(dir, svcRedis))
		if err == nil {
			err = r.start(ctx)
		}
		if err == nil {
			mu.Lock()
			in.redis = r
			mu.Unlock()
			started(svcRedis, t0, fmt.Sprintf("127.0.0.1:%d (redis-server --save \"\" --appendonly no)", r.port), nil)
		} else {
			started(svcRedis, t0, "", err)
		}
	})
	wg.Go(func() {
		t0 := time.Now()
		r, err := node.NewRabbit(filepath.Join(dir, svcRabbit), "idemshop_"+runID+"@localhost")
		if err == nil {
			err = r.Start(ctx)
		}
		if err == nil {
			mu.Lock()
			in.rabbit = r
			mu.Unlock()
			started(svcRabbit, t0, fmt.Sprintf("127.0.0.1:%d (node %s, dist port %d)", r.Port, r.Node, r.DistPort), nil)
		} else {
			started(svcRabbit, t0, "", err)
		}
	})
	wg.Wait()
	if ctx.Err() != nil {
		return in, ctx.Err()
	}
	return in, nil
}

// down stops the instances (gracefully, then by force) and removes their directory.
func (in *privateInfra) down() []error {
	if in == nil {
		return nil
	}
	var errs []error
	var wg sync.WaitGroup
	var mu sync.Mutex
	add := func(err error) {
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	if in.rabbit != nil {
		wg.Go(func() { add(in.rabbit.Stop()) })
	}
	if in.pg != nil {
		wg.Go(func() { add(in.pg.stop(context.Background(), "fast")) })
	}
	if in.redis != nil {
		wg.Go(func() { in.redis.kill() })
	}
	wg.Wait()
	errs = append(errs, CleanupInfra(in.dir)...)
	return errs
}

// url is the shop's URL for svc: the private instance's, or "" when there is none.
func (in *privateInfra) url(svc string) string {
	switch {
	case svc == svcPostgres && in.pg != nil:
		return in.pg.url()
	case svc == svcRedis && in.redis != nil:
		return in.redis.url()
	case svc == svcRabbit && in.rabbit != nil:
		return in.rabbit.URL()
	}
	return ""
}

// CleanupInfra stops whatever still runs from the private-infra directory dir (a Redis, a RabbitMQ
// node, a PostgreSQL postmaster, each found by the pid it left there and checked by its command line)
// and removes the directory. It is what `loadtest soak --cleanup` and the stale sweep run.
func CleanupInfra(dir string) []error {
	var errs []error
	if !strings.HasPrefix(filepath.Base(dir), infraDirPrefix) {
		return []error{fmt.Errorf("%s is not a soak infra directory", dir)}
	}
	// Redis and the RabbitMQ node: SIGKILL (nothing of theirs is kept).
	if pid := node.PIDFrom(filepath.Join(dir, svcRedis, "redis.pid")); pid > 0 && node.CmdlineHas(pid, "redis-server") {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	node.KillRabbit(filepath.Join(dir, svcRabbit))
	// PostgreSQL: immediate shutdown (SIGQUIT to the postmaster), then SIGKILL.
	pm := filepath.Join(dir, svcPostgres, "data", "postmaster.pid")
	if pid := node.PIDFrom(pm); pid > 0 && node.CmdlineHas(pid, "postgres") {
		_ = syscall.Kill(pid, syscall.SIGQUIT)
		for range 100 {
			if !node.Alive(pid) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if node.Alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, fmt.Errorf("remove %s: %w", dir, err))
	}
	return errs
}

// sweepStaleInfra cleans the private-infra directories of soaks that died without cleaning up (their
// owner.pid is no longer a loadtest). Bounded: at most 100 directories.
func sweepStaleInfra(log *slog.Logger) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), infraDirPrefix+"*"))
	for _, d := range dirs[:min(len(dirs), 100)] {
		pid := node.PIDFrom(filepath.Join(d, "owner.pid"))
		if pid > 0 && node.CmdlineHas(pid, "loadtest") {
			continue // a soak running right now
		}
		if st, err := os.Stat(d); pid == 0 && (err != nil || time.Since(st.ModTime()) < 2*time.Minute) {
			continue // a soak that is creating it right now (no owner.pid yet)
		}
		log.Info("soak: removing a dead soak's private infra", "dir", d)
		for _, e := range CleanupInfra(d) {
			log.Warn("soak: stale infra cleanup", "dir", d, "err", e)
		}
	}
}

// ---- PostgreSQL ----

// privatePG is a cluster of its own: initdb into dir/data, pg_ctl start on a free port with the socket
// in dir. As root, initdb and pg_ctl run as the postgres user (runuser), which owns dir.
type privatePG struct {
	bin  string // the directory of initdb and pg_ctl
	dir  string
	port int
	as   []string // "runuser -u postgres --" when the soak is root
}

// pgBinDir finds initdb and pg_ctl: the newest /usr/lib/postgresql/*/bin (Debian), else PATH.
func pgBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		if node.IsExec(filepath.Join(d, "initdb")) && node.IsExec(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && node.IsExec(filepath.Join(filepath.Dir(p), "pg_ctl")) {
		return filepath.Dir(p), nil
	}
	return "", errors.New("initdb/pg_ctl not found (no /usr/lib/postgresql/*/bin, none on PATH): install the PostgreSQL server package")
}

func newPrivatePG(dir string) (*privatePG, error) {
	bin, err := pgBinDir()
	if err != nil {
		return nil, err
	}
	p := &privatePG{bin: bin, dir: dir}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		// PostgreSQL refuses to run as root.
		u, err := osuser.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, and there is no postgres user to run initdb/pg_ctl as: %w", err)
		}
		runuser, err := exec.LookPath("runuser")
		if err != nil {
			return nil, fmt.Errorf("running as root, and runuser is missing (needed to run initdb/pg_ctl as postgres): %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
		p.as = []string{runuser, "-u", "postgres", "--"}
	}
	if p.port, err = node.FreePort(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *privatePG) dataDir() string { return filepath.Join(p.dir, "data") }
func (p *privatePG) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
}

// run runs one of initdb/pg_ctl (as postgres when root).
func (p *privatePG) run(ctx context.Context, within time.Duration, tool string, args ...string) (string, error) {
	argv := append(append(slices.Clone(p.as), filepath.Join(p.bin, tool)), args...)
	return node.RunCmd(ctx, within, os.Environ(), argv[0], argv[1:]...)
}

func (p *privatePG) init(ctx context.Context) error {
	_, err := p.run(ctx, pgStartWithin, "initdb", "-D", p.dataDir(), "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale=C", "-N")
	return err
}

// options: loopback only, the socket in the cluster's directory; fsync off (a throwaway cluster, and a
// fast shutdown writes everything anyway).
func (p *privatePG) options() string {
	return fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100", p.port, p.dir)
}

func (p *privatePG) start(ctx context.Context) error {
	_, err := p.run(ctx, pgStartWithin, "pg_ctl", "-D", p.dataDir(), "-o", p.options(),
		"-l", filepath.Join(p.dir, "postgres.log"), "-w", "-t", "60", "start")
	return err
}

// stop is pg_ctl stop -m mode; on failure, an immediate stop.
func (p *privatePG) stop(ctx context.Context, mode string) error {
	_, err := p.run(ctx, node.CtlWithin, "pg_ctl", "-D", p.dataDir(), "-m", mode, "-w", "-t", "30", "stop")
	if err != nil && mode != "immediate" {
		_, err2 := p.run(ctx, node.CtlWithin, "pg_ctl", "-D", p.dataDir(), "-m", "immediate", "-w", "-t", "30", "stop")
		if err2 == nil {
			return nil
		}
	}
	return err
}

// up reports whether the cluster answers a query.
func (p *privatePG) up(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.url())
	if err != nil {
		return false
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.Ping(ctx) == nil
}

// ---- Redis ----

// privateRedis is a redis-server of its own, a child of the soak (Pdeathsig), that keeps nothing on
// disk: a restart brings it back empty on the same port.
type privateRedis struct {
	bin, dir string
	port     int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func newPrivateRedis(dir string) (*privateRedis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server not found on PATH: install the Redis server package")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r := &privateRedis{bin: bin, dir: dir}
	if r.port, err = node.FreePort(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *privateRedis) url() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.port) }

// start runs redis-server in the foreground (as the soak's child) and waits for its PING.
func (r *privateRedis) start(ctx context.Context) error {
	r.mu.Lock()
	cmd := exec.Command(r.bin, "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--daemonize", "no", "--dir", r.dir, "--logfile", filepath.Join(r.dir, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		r.mu.Unlock()
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	r.cmd, r.done = cmd, done
	r.mu.Unlock()
	_ = os.WriteFile(filepath.Join(r.dir, "redis.pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
	go func() { _ = cmd.Wait(); close(done) }()

	rdb, err := redisx.Open(r.url(), time.Second)
	if err != nil {
		return err
	}
	defer rdb.Close()
	deadline := time.Now().Add(redisStartWithin)
	addr := fmt.Sprintf("127.0.0.1:%d", r.port)
	for {
		// The port first: go-redis logs every refused dial.
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = c.Close()
			if rdb.Ping(ctx).Err() == nil {
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server exited at start: %s", node.Tail(filepath.Join(r.dir, "redis.log"), 5))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server did not answer PING within %s", redisStartWithin)
		}
	}
}

func (r *privateRedis) running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done == nil {
		return false
	}
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// shutdownNoSave is SHUTDOWN NOSAVE; it waits (5 s) for the process to exit, then kills it.
func (r *privateRedis) shutdownNoSave(ctx context.Context) error {
	rdb, err := redisx.Open(r.url(), 2*time.Second)
	if err != nil {
		return err
	}
	_ = rdb.ShutdownNoSave(ctx).Err() // the connection closes under it: no answer is the answer
	_ = rdb.Close()
	r.mu.Lock()
	done := r.done
	r.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-time.After(5 * time.Second):
		r.kill()
		return errors.New("redis-server did not exit within 5s of SHUTDOWN NOSAVE: killed")
	}
}

// kill is SIGKILL and a wait (bounded) for the exit.
func (r *privateRedis) kill() {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
}
