package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/events"
	"idemshop/internal/platform/fault"
	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/points"
	"idemshop/internal/testenv"
)

// The lab's consumer crash windows with a real process and a real SIGKILL (the binary kills itself at
// the fault point, so the kill lands on that exact line). The second process is the redelivery's
// consumer; the invariant is checked on the database.
func TestCrashWindowsAreGuarded(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "idemshop/cmd/points-consumer")
	cases := map[string]struct {
		fault         fault.Point
		rowsAfterKill int64  // what the dead process left committed
		secondOutcome string // how the redelivery is counted
	}{
		"S6 killed after the commit, before the ack": {
			fault: points.CrashAfterCommit, rowsAfterKill: 1, secondOutcome: points.OutcomeDuplicate,
		},
		"S11 killed after the claim, before the commit": {
			fault: points.CrashAfterClaim, rowsAfterKill: 0, secondOutcome: points.OutcomeApplied,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := testenv.New(t)
			top := rabbitmq.OrderPaidTopology().WithPrefix(env.Prefix)
			declare(t, env, top)
			ev := events.OrderPaid{EventID: uuid.NewString(), OrderID: 77, UserID: 2, AmountCents: 4900,
				Points: 49, OccurredAt: time.Now().UTC()}

			first := start(t, bin, env, "ORDERS_LAB=true", "POINTS_FAULT="+string(tc.fault))
			publish(t, env, top, ev)
			err := first.wait(t, 15*time.Second)
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "the process died; logs:\n%s", first.logs.String())
			assert.Equal(t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal(), "killed, not exited")
			assert.Contains(t, first.logs.String(), "LAB FAULT ARMED", "lab faults are announced at start")
			assert.Equal(t, tc.rowsAfterKill, ledgerRows(t, env))
			lease := env.Redis.Get(context.Background(), env.Prefix+"points:dedup:"+points.BizIDOrderPaid(77)).Val()
			assert.NotEmpty(t, lease, "the dead process left its claim behind")
			assert.NotEqual(t, "done", lease, "and never marked it done")

			second := start(t, bin, env)
			waitFor(t, 15*time.Second, func() bool { return second.metric(t, tc.secondOutcome) == 1 },
				"the redelivery is handled once the lease ran out; logs:\n%s", second.logs.String())
			assert.Equal(t, 0, second.metric(t, points.OutcomeFailed), "waiting for the lease is not a failure")
			assert.EqualValues(t, 1, ledgerRows(t, env), "exactly one credit")
			var balance int64
			require.NoError(t, env.DB.Raw(`SELECT balance FROM points_accounts WHERE user_id = 2`).Scan(&balance).Error)
			assert.EqualValues(t, 49, balance)

			require.NoError(t, second.cmd.Process.Signal(syscall.SIGTERM))
			assert.NoError(t, second.wait(t, 15*time.Second), "graceful exit 0; logs:\n%s", second.logs.String())
			assert.Contains(t, second.logs.String(), "points-consumer stopped")
		})
	}
}

// The binary's own topology binds order.refunded to its queue, and it reverses the credit: balance 0,
// one credit row and one reversal row.
func TestRefundIsReversed(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "idemshop/cmd/points-consumer")
	env := testenv.New(t)
	top := rabbitmq.OrderPaidTopology().WithPrefix(env.Prefix)
	declare(t, env, top)
	p := start(t, bin, env)

	publish(t, env, top, events.OrderPaid{EventID: uuid.NewString(), OrderID: 5, UserID: 1, AmountCents: 3000,
		Points: 30, OccurredAt: time.Now().UTC()})
	ev := events.OrderRefunded{EventID: uuid.NewString(), OrderID: 5, UserID: 1, AmountCents: 3000, Points: 30,
		OccurredAt: time.Now().UTC()}
	publishTo(t, env, top, events.RoutingKeyRefunded, ev.EventID, ev)
	waitFor(t, 15*time.Second, func() bool { return p.metric(t, points.OutcomeApplied) == 2 },
		"credit and reversal applied; logs:\n%s", p.logs.String())
	var got struct {
		Rows    int64
		Sum     int64
		Balance int64
	}
	require.NoError(t, env.DB.Raw(`SELECT count(*) AS rows, COALESCE(sum(delta), 0) AS sum,
		(SELECT balance FROM points_accounts WHERE user_id = 1) AS balance FROM points_ledger`).Scan(&got).Error)
	assert.Equal(t, struct{ Rows, Sum, Balance int64 }{2, 0, 0}, got)
}

// Without lab mode a fault is refused at start, naming the variable.
func TestFaultNeedsLabMode(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "idemshop/cmd/points-consumer")
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "POINTS_FAULT=crash-after-commit", "ORDERS_LAB=false")
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "POINTS_FAULT needs ORDERS_LAB=true")
}

// --- helpers ---

type proc struct {
	cmd    *exec.Cmd
	logs   *testenv.Output
	addr   string
	exited chan error
}

func start(t *testing.T, bin string, env *testenv.Env, extra ...string) *proc {
	t.Helper()
	p := &proc{logs: &testenv.Output{}, addr: testenv.FreeAddr(t), exited: make(chan error, 1)}
	p.cmd = exec.Command(bin)
	p.cmd.Env = append(os.Environ(), "HTTP_ADDR="+p.addr, "DATABASE_URL="+env.DatabaseURL,
		"REDIS_URL="+env.RedisURL, "AMQP_URL="+env.AMQPURL, "REDIS_KEY_PREFIX="+env.Prefix,
		"AMQP_NAME_PREFIX="+env.Prefix, "POINTS_LEASE_TTL=1500ms", "POINTS_LEASE_POLL=50ms",
		"AMQP_RECONNECT_MIN=50ms", "AMQP_RECONNECT_MAX=500ms", "LOG_LEVEL=debug")
	p.cmd.Env = append(p.cmd.Env, extra...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	require.NoError(t, p.cmd.Start())
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	waitFor(t, 15*time.Second, func() bool {
		resp, err := http.Get("http://" + p.addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "points-consumer ready; logs:\n%s", p.logs.String())
	// Ready means the dependencies answer; wait until the consumer itself is subscribed too.
	waitFor(t, 15*time.Second, func() bool { return p.logs.Contains("points consumer connected") },
		"subscribed; logs:\n%s", p.logs.String())
	return p
}

func (p *proc) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-p.exited:
		return err
	case <-time.After(d):
		t.Fatalf("process still running after %s; logs:\n%s", d, p.logs.String())
		return errors.New("unreachable")
	}
}

var outcomeLine = regexp.MustCompile(`(?m)^idemshop_points_messages_total\{outcome="([a-z_]+)"\} (\d+)`)

// metric reads idemshop_points_messages_total{outcome} from the process's /metrics.
func (p *proc) metric(t *testing.T, outcome string) int {
	resp, err := http.Get("http://" + p.addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, m := range outcomeLine.FindAllStringSubmatch(string(b), -1) {
		if m[1] == outcome {
			n, _ := strconv.Atoi(m[2])
			return n
		}
	}
	return -1
}

func declare(t *testing.T, env *testenv.Env, top rabbitmq.Topology) {
	t.Helper()
	env.Queue(top.Queue[len(env.Prefix):]) // testenv deletes the queues at the end
	env.Queue(top.DeadLetterQueue[len(env.Prefix):])
	conn, err := amqp.Dial(env.AMQPURL)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, rabbitmq.Declare(ch, top))
	t.Cleanup(func() {
		conn, err := amqp.Dial(env.AMQPURL)
		if err != nil {
			return
		}
		defer conn.Close()
		if ch, err := conn.Channel(); err == nil {
			_ = ch.ExchangeDelete(top.Exchange, false, false)
			_ = ch.ExchangeDelete(top.DeadLetterExchange, false, false)
		}
	})
}

func publish(t *testing.T, env *testenv.Env, top rabbitmq.Topology, ev events.OrderPaid) {
	t.Helper()
	publishTo(t, env, top, top.RoutingKey, ev.EventID, ev)
}

// publishTo publishes ev as JSON with routingKey, as the outbox relay does.
func publishTo(t *testing.T, env *testenv.Env, top rabbitmq.Topology, routingKey, eventID string, ev any) {
	t.Helper()
	conn, err := amqp.Dial(env.AMQPURL)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	body, err := json.Marshal(ev)
	require.NoError(t, err)
	dc, err := ch.PublishWithDeferredConfirm(top.Exchange, routingKey, false, false, amqp.Publishing{
		DeliveryMode: amqp.Persistent, MessageId: eventID, ContentType: "application/json", Body: body})
	require.NoError(t, err)
	ok, err := dc.WaitContext(context.Background())
	require.NoError(t, err)
	require.True(t, ok)
}

func ledgerRows(t *testing.T, env *testenv.Env) int64 {
	var n int64
	require.NoError(t, env.DB.Raw(`SELECT count(*) FROM points_ledger`).Scan(&n).Error)
	return n
}

func waitFor(t *testing.T, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, timeout, 25*time.Millisecond, append([]any{msg}, args...)...)
}

// Arguments are refused, not ignored: `points-consumer --help` started it (a helper's finding, 2026-12-06).
func TestArgumentsAreRefused(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "idemshop/cmd/points-consumer")
	out, err := exec.Command(bin, "--help").CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", out)
	assert.Equal(t, 1, ee.ExitCode())
	assert.Contains(t, string(out), `takes no arguments, got "--help"`)
}
