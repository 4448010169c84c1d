package main_test

// End to end: the three binaries and loadtest, built and run as real processes against the local
// PostgreSQL, Redis and RabbitMQ, as `make demo` runs them.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/platform/redisx"
	"idemshop/internal/testenv"
)

type stack struct {
	t       *testing.T
	bin     string
	env     []string
	mu      sync.Mutex
	procs   []*exec.Cmd
	logs    map[string]*testenv.Output
	mockURL string
	dbURL   string // the stack's database, for the tests' own queries
}

func newStack(t *testing.T) *stack {
	t.Helper()
	return newNamedStack(t, "lab")
}

// newNamedStack is newStack on a database, Redis prefix and broker names of its own, named name: two
// stacks of one test process never share rows, keys or queues.
func newNamedStack(t *testing.T, name string) *stack {
	t.Helper()
	svc := testenv.Find(t)
	var dir string
	for _, pkg := range []string{"cmd/orders", "cmd/payments-mock", "cmd/points-consumer", "loadtest"} {
		dir = filepath.Dir(testenv.Build(t, "idemshop/"+pkg))
	}

	run := fmt.Sprintf("e2e%d%s", os.Getpid(), name)
	db := "idemshop_test_" + fmt.Sprint(os.Getpid()) + "_" + name
	// Registered before s.stop, so it runs after the processes are gone: the database, and the run's
	// Redis keys and broker names (a lab run leaves fence keys, done marks, an exchange and queues).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, svc.PostgresURL); err == nil {
			_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
			conn.Close(ctx)
		}
		if conn, err := rabbitmq.Dial(ctx, svc.AMQPURL); err == nil {
			rabbitmq.Delete(conn, rabbitmq.OrderPaidTopology().WithPrefix(run+":"))
			_ = conn.Close()
		}
		if rdb, err := redisx.Open(svc.RedisURL, time.Second); err == nil {
			_ = redisx.DeletePrefix(ctx, rdb, run+":")
			_ = rdb.Close()
		}
	})
	s := &stack{t: t, bin: dir, logs: map[string]*testenv.Output{},
		dbURL: strings.Replace(svc.PostgresURL, "/postgres?", "/"+db+"?", 1)}
	s.env = append(os.Environ(),
		"DATABASE_URL="+s.dbURL,
		"REDIS_URL="+svc.RedisURL, "AMQP_URL="+svc.AMQPURL,
		"REDIS_KEY_PREFIX="+run+":", "AMQP_NAME_PREFIX="+run+":",
		"ORDERS_LAB=true", "SWEEP_INTERVAL=300ms", "LOG_LEVEL=warn", "LAB_QUIET=45s")
	t.Cleanup(s.stop)
	return s
}

// start runs a binary with extra env and waits for its /readyz.
func (s *stack) start(name, addr string, extra ...string) {
	s.t.Helper()
	cmd := exec.Command(filepath.Join(s.bin, strings.Split(name, "#")[0]))
	cmd.Env = append(append(append([]string{}, s.env...), "HTTP_ADDR="+addr), extra...)
	buf := &testenv.Output{}
	cmd.Stdout, cmd.Stderr = buf, buf
	require.NoError(s.t, cmd.Start())
	s.mu.Lock()
	s.procs = append(s.procs, cmd)
	s.logs[name] = buf
	s.mu.Unlock()
	testenv.WaitReady(s.t, "http://"+addr, 60*time.Second, buf)
}

func (s *stack) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range s.procs {
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = p.Process.Kill()
		}
	}
	s.procs = nil
}

// loadtest runs the loadtest binary and returns its exit code and stdout.
func (s *stack) loadtest(ordersURL string, args ...string) (int, []byte) {
	s.t.Helper()
	code, stdout, _ := s.loadtestStreams(ordersURL, args...)
	return code, stdout
}

// loadtestStreams runs the loadtest binary and returns its exit code, stdout and stderr.
func (s *stack) loadtestStreams(ordersURL string, args ...string) (int, []byte, []byte) {
	s.t.Helper()
	return s.loadtestWith(nil, ordersURL, args...)
}

// loadtestWith is loadtestStreams with extra environment (a later value of a variable wins).
func (s *stack) loadtestWith(extra []string, ordersURL string, args ...string) (int, []byte, []byte) {
	s.t.Helper()
	cmd := exec.Command(filepath.Join(s.bin, "loadtest"), args...)
	cmd.Env = append(append(append([]string{}, s.env...), "ORDERS_URL="+ordersURL, "PAYMENTS_URL="+s.mockURL), extra...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(s.t, err)
	}
	s.t.Logf("loadtest %v: exit %d\n%s%s", args, code, stdout.String(), stderr.String())
	return code, stdout.Bytes(), stderr.Bytes()
}

type incident struct {
	Orders     int      `json:"orders"`
	Violations []string `json:"violations"`
	Callbacks  struct{ Received, Applied int64 }
	StockDelta int64 `json:"stock_delta"`
	WantStock  int64 `json:"expected_stock_delta"`
}

func TestLoadtestAgainstRealProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole stack")
	}
	t.Parallel()
	s := newStack(t)
	mock := testenv.FreeAddr(t)
	s.mockURL = "http://" + mock
	s.start("payments-mock", mock)

	// Two orders replicas behind a round-robin proxy, and two consumers: correctness may not depend on
	// which process handles what.
	a, b := testenv.FreeAddr(t), testenv.FreeAddr(t)
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	proxyURL := "http://" + pl.Addr().String()
	for _, addr := range []string{a, b} {
		s.start("orders#"+addr, addr, "PAYMENTS_URL="+s.mockURL, "CALLBACK_URL="+proxyURL+"/v1/payments/callback")
	}
	var n atomic.Uint64
	backends := []*url.URL{{Scheme: "http", Host: a}, {Scheme: "http", Host: b}}
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(backends[n.Add(1)%2])
	}}
	psrv := &httptest.Server{Listener: pl, Config: &http.Server{Handler: proxy}}
	psrv.Start()
	t.Cleanup(psrv.Close)
	s.start("points-consumer#1", testenv.FreeAddr(t))
	s.start("points-consumer#2", testenv.FreeAddr(t))

	// The incident's orders have quantities 1, 2, 3, 1, 2, 3, ... at 12.50 EUR a unit, and an order earns
	// a point per whole euro (12, 25, 37): 20 orders are 39 units and 481 points, 10 are 19 units and 234
	// points. The rows are read with the test's own SQL (--keep), not from the report.
	t.Run("incident guarded, one replica", func(t *testing.T) {
		code, out := s.loadtest("http://"+a, "incident", "--json", "--keep", "--orders", "20")
		require.Equal(t, 0, code)
		var rep incident
		require.NoError(t, json.Unmarshal(out, &rep))
		assert.Empty(t, rep.Violations)
		got := s.incidentRows(t, "lab-incident-guarded-%")
		assert.Equal(t, map[string]int64{"PAID": 20}, got.statuses)
		assert.EqualValues(t, -39, got.stockDelta, "stock -q per order")
		assert.EqualValues(t, 60, got.received, "three copies of each callback arrived")
		assert.EqualValues(t, 20, got.applied)
		assert.EqualValues(t, 481, got.balance, "points +x per order")
	})
	t.Run("incident unsafe shows the damage", func(t *testing.T) {
		code, out := s.loadtest("http://"+a, "incident", "--json", "--keep", "--unsafe", "--orders", "10")
		require.Equal(t, 1, code)
		var rep incident
		require.NoError(t, json.Unmarshal(out, &rep))
		assert.NotEmpty(t, rep.Violations)
		got := s.incidentRows(t, "lab-incident-unsafe-%")
		assert.EqualValues(t, -3*19, got.stockDelta, "every copy deducted")
		assert.EqualValues(t, 30, got.applied, "every copy applied")
		assert.EqualValues(t, 3*234, got.balance, "every copy credited")
	})
	t.Run("incident guarded, two replicas and two consumers", func(t *testing.T) {
		code, out := s.loadtest(proxyURL, "incident", "--json", "--keep", "--orders", "20")
		require.Equal(t, 0, code)
		var rep incident
		require.NoError(t, json.Unmarshal(out, &rep))
		assert.Empty(t, rep.Violations)
		got := s.incidentRows(t, "lab-incident-guarded-%")
		assert.Equal(t, map[string]int64{"PAID": 20}, got.statuses)
		assert.EqualValues(t, -39, got.stockDelta)
		assert.EqualValues(t, 20, got.applied)
		assert.EqualValues(t, 481, got.balance)
	})
	t.Run("replay the incident file, guarded then unsafe", func(t *testing.T) {
		file, err := filepath.Abs(filepath.Join("replays", "incident-triple-callback.jsonl"))
		require.NoError(t, err)
		// Four orders of quantities 1, 2, 3, 2 at 12.50 EUR, each SUCCESS recorded three times at once.
		code, out := s.loadtest(proxyURL, "replay", "--json", "--keep", file)
		require.Equal(t, 0, code)
		var rep replayReport
		require.NoError(t, json.Unmarshal(out, &rep))
		assert.Empty(t, rep.Violations)
		got := s.replayRows(t, rep)
		assert.Equal(t, map[string]int64{"PAID": 4}, got.statuses)
		assert.EqualValues(t, -8, got.stockDelta, "stock -q")
		assert.EqualValues(t, 99, got.balance, "points +x")
		assert.EqualValues(t, 12, got.received)
		assert.EqualValues(t, 4, got.applied)

		// The flags may follow the file, as in the issue's `loadtest replay FILE --unsafe`.
		code, out = s.loadtest("http://"+a, "replay", file, "--unsafe", "--json", "--keep")
		require.Equal(t, 1, code, "the unsafe handler breaks the invariants")
		require.NoError(t, json.Unmarshal(out, &rep))
		assert.NotEmpty(t, rep.Violations)
		got = s.replayRows(t, rep)
		assert.Equal(t, map[string]int64{"PAID": 4}, got.statuses)
		assert.EqualValues(t, -24, got.stockDelta, "stock -3q")
		assert.EqualValues(t, 297, got.balance, "points +3x")
		assert.EqualValues(t, 12, got.applied, "every copy applied")
	})
	t.Run("replay a shipped file by name, text report", func(t *testing.T) {
		// No such file in the working directory: the copy built into the binary is replayed.
		code, out := s.loadtest("http://"+a, "replay", "--unsafe", "decline-race.jsonl")
		assert.Equal(t, 1, code)
		assert.Contains(t, string(out), "replay decline-race.jsonl (shipped), UNSAFE:")
		for line := range strings.Lines(string(out)) {
			assert.LessOrEqual(t, len(strings.TrimRight(line, "\n")), 100, "report lines fit 100 columns: %q", line)
		}
		code, out = s.loadtest("http://"+a, "replay", "decline-race.jsonl")
		assert.Equal(t, 0, code)
		assert.Contains(t, string(out), "every invariant held")
		code, _ = s.loadtest("http://"+a, "replay", "no-such-file.jsonl")
		assert.Equal(t, 2, code)
	})
	t.Run("lab all", func(t *testing.T) {
		code, out := s.loadtest("http://"+a, "lab", "--json", "all")
		var rep struct {
			Scenarios []struct {
				ID     string `json:"id"`
				Error  string `json:"error"`
				Unsafe struct {
					Reproduced bool
					NoTwin     bool `json:"no_twin"`
				} `json:"unsafe"`
				Guarded struct{ OK bool } `json:"guarded"`
			} `json:"scenarios"`
		}
		require.NoError(t, json.Unmarshal(out, &rep))
		require.Len(t, rep.Scenarios, 12)
		// design.md's fields are there even when empty: a reader checks "error", not its absence.
		var members struct{ Scenarios []map[string]json.RawMessage }
		require.NoError(t, json.Unmarshal(out, &members))
		for _, sc := range members.Scenarios {
			for _, f := range []string{"id", "title", "unsafe", "guarded", "error", "seconds"} {
				assert.Contains(t, sc, f, "scenario %s", sc["id"])
			}
		}
		for _, sc := range rep.Scenarios {
			assert.Empty(t, sc.Error, sc.ID)
			// S9 has no unsafe variant: it says so, and claims no reproduction.
			assert.Equal(t, sc.ID == "S9", sc.Unsafe.NoTwin, "%s: no unsafe twin", sc.ID)
			assert.NotEqual(t, sc.Unsafe.NoTwin, sc.Unsafe.Reproduced, "%s unsafe side reproduced (or has no twin)", sc.ID)
			assert.True(t, sc.Guarded.OK, "%s guarded side held", sc.ID)
		}
		assert.Equal(t, 0, code)
	})
	t.Run("lab text report fits 100 columns, logs stay out", func(t *testing.T) {
		// S9 is the noisy one: it starts an orders without Redis in the loadtest process. Its lines (and
		// the stack's LOG_LEVEL=warn) must not reach either stream by default.
		code, out, errOut := s.loadtestStreams("http://"+a, "lab", "S1", "S9")
		assert.Equal(t, 0, code)
		lines := 0
		for line := range strings.Lines(string(out)) {
			lines++
			assert.LessOrEqual(t, utf8.RuneCountInString(strings.TrimRight(line, "\n")), 100, "fits 100 columns: %q", line)
			assert.NotContains(t, line, "level=", "a log line in the report")
		}
		assert.Equal(t, 5, lines, "header, column names, S1, S9, count")
		assert.Contains(t, string(out), "2 of 2 passed")
		assert.NotContains(t, string(errOut), "level=INFO")
		assert.NotContains(t, string(errOut), "level=WARN")
	})
	t.Run("each scenario starts from a calm platform, whatever chaos was left on", func(t *testing.T) {
		// Set by hand or from /lab: every payment call reset, every SUCCESS held back 3 s. PUT merges,
		// so a lab that set only its own fields ran S5 under them (EOF on its payment calls).
		chaos := func(method, body string) map[string]any {
			req, err := http.NewRequest(method, s.mockURL+"/admin/chaos", strings.NewReader(body))
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			var c map[string]any
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&c))
			return c
		}
		chaos(http.MethodPut, `{"reset_rate":1,"delay_success_ms":3000}`)
		// A trailing slash on ORDERS_URL is the same orders (it made "//lab/lab.js", a 404 read as "not
		// in lab mode").
		code, _, _ := s.loadtestStreams("http://"+a+"/", "lab", "S5")
		assert.Equal(t, 0, code)
		after := chaos(http.MethodGet, "")
		assert.EqualValues(t, 0, after["reset_rate"])
		assert.EqualValues(t, 0, after["delay_success_ms"])
	})
	t.Run("a shop down or not in lab mode is a set-up error, and nothing is written", func(t *testing.T) {
		// Exit 1 means "an invariant broke" (or, for the unsafe side, "the failure showed"): a shop
		// whose lab routes answer 404 must not read as either.
		nolab := testenv.FreeAddr(t)
		s.start("orders#nolab", nolab, "ORDERS_LAB=false", "PAYMENTS_URL="+s.mockURL)
		users := func() int64 {
			conn, err := pgx.Connect(context.Background(), s.dbURL)
			require.NoError(t, err)
			defer conn.Close(context.Background())
			var n int64
			require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*) FROM users`).Scan(&n))
			return n
		}
		before := users()
		down := "http://" + testenv.FreeAddr(t) // nothing listens there
		for _, c := range []struct {
			url  string
			args []string
			want string
		}{
			{"http://" + nolab, []string{"lab", "S1"}, "start orders with ORDERS_LAB=true"},
			{"http://" + nolab, []string{"incident", "--unsafe", "--orders", "2"}, "start orders with ORDERS_LAB=true"},
			{"http://" + nolab, []string{"bench", "--only", "create", "--duration", "200ms"}, "start orders with ORDERS_LAB=true"},
			{down, []string{"incident", "--orders", "2"}, "orders at " + down + " (ORDERS_URL) does not answer"},
			{down, []string{"lab", "S1"}, "(ORDERS_URL) does not answer"},
		} {
			code, out, errOut := s.loadtestStreams(c.url, c.args...)
			assert.Equal(t, 2, code, "%v against %s", c.args, c.url)
			assert.Contains(t, string(errOut), c.want, "%v", c.args)
			assert.Empty(t, out, "%v: no report", c.args)
		}
		// A payments-mock whose admin API wants a token loadtest does not have: the lab and the incident
		// would set its chaos, so that is a set-up error too, not a scenario's error.
		locked := testenv.FreeAddr(t)
		s.start("payments-mock#locked", locked, "ADMIN_TOKEN=s3cret-admin-token")
		for _, args := range [][]string{{"lab", "S7"}, {"incident", "--orders", "2"}} {
			code, out, errOut := s.loadtestWith([]string{"PAYMENTS_URL=http://" + locked}, "http://"+a, args...)
			assert.Equal(t, 2, code, "%v", args)
			assert.Contains(t, string(errOut), "set ADMIN_TOKEN to payments-mock's ADMIN_TOKEN", "%v", args)
			assert.Empty(t, out, "%v: no report", args)
		}
		// A database that is not the shop's: replay checked the services only, and its first create
		// was refused 401, "<nil> (HTTP 401 ...)", the variable unnamed (a helper's finding, 2026-12-06).
		other := testenv.New(t).DatabaseURL
		for _, args := range [][]string{{"replay", "decline-race.jsonl"}, {"incident", "--orders", "2"}} {
			code, out, errOut := s.loadtestWith([]string{"DATABASE_URL=" + other}, "http://"+a, args...)
			assert.Equal(t, 2, code, "%v", args)
			assert.Contains(t, string(errOut), "DATABASE_URL must name the database orders uses", "%v", args)
			assert.Empty(t, out, "%v: no report", args)
		}
		// And one that does not exist: the driver's "does not exist" did not say which setting named it.
		missing := strings.Replace(other, "/"+path.Base(strings.SplitN(other, "?", 2)[0]), "/idemshop_no_such_db", 1)
		require.NotEqual(t, other, missing)
		for _, args := range [][]string{{"replay", "decline-race.jsonl"}, {"lab", "S1"}} {
			code, out, errOut := s.loadtestWith([]string{"DATABASE_URL=" + missing}, "http://"+a, args...)
			assert.Equal(t, 2, code, "%v", args)
			assert.Contains(t, string(errOut), "loadtest: DATABASE_URL: ", "%v", args)
			assert.Empty(t, out, "%v: no report", args)
		}
		// A LOG_LEVEL that is none (replay refused it; incident and lab took it for "not debug").
		for _, args := range [][]string{{"lab", "S1"}, {"incident", "--orders", "2"}} {
			code, out, errOut := s.loadtestWith([]string{"LOG_LEVEL=loud"}, "http://"+a, args...)
			assert.Equal(t, 2, code, "%v", args)
			assert.Contains(t, string(errOut), `LOG_LEVEL "loud"`, "%v", args)
			assert.Empty(t, out, "%v: no report", args)
		}
		assert.Equal(t, before, users(), "no lab user was created")
	})
}

type replayReport struct {
	Violations []string `json:"violations"`
	UserID     int64    `json:"user_id"`
	Orders     []struct {
		ID int64 `json:"id"`
	} `json:"orders"`
}

// replayed is what a replay's rows say, read with the test's own SQL.
type replayed struct {
	statuses          map[string]int64
	stockDelta        int64 // summed over the replay's products, 1000 units each at first
	balance           int64
	received, applied int64
}

// incidentRows reads the rows the newest --keep incident run whose lab user matches pattern left: its
// orders, their product (100000 units at first) and callbacks, and the user's points.
func (s *stack) incidentRows(t *testing.T, pattern string) replayed {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var user int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT max(id) FROM users WHERE name LIKE $1`, pattern).Scan(&user))
	out := replayed{statuses: map[string]int64{}}
	rows, err := conn.Query(ctx, `SELECT o.status, count(*) FROM orders o WHERE o.user_id = $1 GROUP BY o.status`, user)
	require.NoError(t, err)
	for rows.Next() {
		var status string
		var n int64
		require.NoError(t, rows.Scan(&status, &n))
		out.statuses[status] = n
	}
	require.NoError(t, rows.Err())
	require.NoError(t, conn.QueryRow(ctx, `SELECT
		  (SELECT p.stock - 100000 FROM products p WHERE p.id = (SELECT max(product_id) FROM orders WHERE user_id = $1)),
		  (SELECT count(*) FROM payment_callbacks c JOIN orders o ON o.id = c.order_id WHERE o.user_id = $1 AND c.signature_ok),
		  (SELECT count(*) FROM payment_callbacks c JOIN orders o ON o.id = c.order_id WHERE o.user_id = $1 AND c.applied),
		  COALESCE((SELECT balance FROM points_accounts WHERE user_id = $1), 0)`, user).
		Scan(&out.stockDelta, &out.received, &out.applied, &out.balance))
	return out
}

// replayRows reads the rows a --keep replay left: its user's orders, their products and callbacks, and
// the user's points.
func (s *stack) replayRows(t *testing.T, rep replayReport) replayed {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	out := replayed{statuses: map[string]int64{}}
	rows, err := conn.Query(ctx, `SELECT o.status, p.stock - 1000,
		  (SELECT count(*) FROM payment_callbacks c WHERE c.order_id = o.id AND c.signature_ok),
		  (SELECT count(*) FROM payment_callbacks c WHERE c.order_id = o.id AND c.applied)
		FROM orders o JOIN products p ON p.id = o.product_id WHERE o.user_id = $1`, rep.UserID)
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		var status string
		var delta, received, applied int64
		require.NoError(t, rows.Scan(&status, &delta, &received, &applied))
		out.statuses[status]++
		out.stockDelta += delta
		out.received += received
		out.applied += applied
		n++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, len(rep.Orders), n, "one fresh order per recorded order")
	require.NoError(t, conn.QueryRow(ctx, `SELECT COALESCE((SELECT balance FROM points_accounts WHERE user_id = $1), 0)`,
		rep.UserID).Scan(&out.balance))
	return out
}
