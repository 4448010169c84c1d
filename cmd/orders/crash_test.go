package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/lock"
	"idemshop/internal/ordersapp"
	"idemshop/internal/pay"
	"idemshop/internal/paymock"
	"idemshop/internal/platform/config"
	"idemshop/internal/platform/redisx"
	"idemshop/internal/testenv"
)

// A real crash in the pay flow's worst window: after the platform created the payment, before the
// result was written. The process dies (exit 137); `orders sweep --once`, a new process, repairs the
// record within one sweep, and there is exactly one payment.
func TestPayCrashBeforeWriteIsRepairedBySweep(t *testing.T) {
	t.Parallel()
	svc := testenv.Find(t)
	bin := testenv.Build(t, "idemshop/cmd/orders")

	mock := testenv.StartPaymentsMock(t, paymock.Config{
		Secret: []byte(config.DefaultOrders().PaymentWebhookSecret), RetrySchedule: []time.Duration{50 * time.Millisecond},
		CallbackTimeout: time.Second, CreateTimeoutDelay: time.Second, DeliveryLogLimit: 100,
		Chaos: paymock.Chaos{Duplicates: 1, Parallel: true, Seed: 7},
	}).Server

	name := fmt.Sprintf("idemshop_test_%d_crash", os.Getpid())
	dbURL := strings.Replace(svc.PostgresURL, "/postgres?", "/"+name+"?", 1)
	t.Cleanup(func() {
		ctx := context.Background()
		if conn, err := pgx.Connect(ctx, svc.PostgresURL); err == nil {
			_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			conn.Close(ctx)
		}
	})
	addr := testenv.FreeAddr(t)
	// Its own key prefix and queue names, deleted at the end: with the defaults the process would
	// declare the shop's own exchange and queue on the shared broker, and publish into them.
	prefix := cleanPrefix(t, svc, "crash")
	env := append(os.Environ(),
		"HTTP_ADDR="+addr, "DATABASE_URL="+dbURL, "REDIS_URL="+svc.RedisURL, "AMQP_URL="+svc.AMQPURL,
		"REDIS_KEY_PREFIX="+prefix, "AMQP_NAME_PREFIX="+prefix, "PAYMENTS_URL="+mock.URL,
		"CALLBACK_URL=http://"+addr+"/v1/payments/callback", "PAY_LEASE=500ms", "PAYMENTS_TIMEOUT=400ms", "SWEEP_INTERVAL=1h")

	var logs testenv.Output
	crashing := exec.Command(bin)
	crashing.Env = append(append([]string{}, env...), "ORDERS_LAB=true", "PAY_FAULT=crash-before-write")
	crashing.Stdout, crashing.Stderr = &logs, &logs
	require.NoError(t, crashing.Start())
	exited := make(chan error, 1)
	go func() { exited <- crashing.Wait() }()
	t.Cleanup(func() { _ = crashing.Process.Kill() })
	testenv.WaitReady(t, "http://"+addr, 30*time.Second, &logs)
	assert.True(t, logs.Contains(ordersapp.LabWarning), "serve in lab mode says so")

	orderID := post(t, "http://"+addr+"/v1/orders", "order-1", `{"product_id":1,"quantity":1}`)
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://%s/v1/orders/%d/pay", addr, orderID), nil)
	req.Header.Set("Authorization", "Bearer alice-token")
	req.Header.Set("Idempotency-Key", "pay-crash")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the pay request should have died with the process, got %d", resp.StatusCode)
	}
	t.Logf("pay sent at %s", time.Now().Format(time.RFC3339Nano))
	select {
	case err := <-exited:
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal(), "killed, not exited")
	case <-time.After(10 * time.Second):
		t.Fatal("the process did not crash")
	}
	assert.Contains(t, logs.String(), "LAB FAULT ARMED")

	conn, err := pgx.Connect(context.Background(), dbURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	state := func() (st string, expired bool) {
		var until *time.Time
		require.NoError(t, conn.QueryRow(context.Background(),
			`SELECT state, locked_until, coalesce(locked_until < now(), true) FROM idempotency_keys WHERE idempotency_key = 'pay-crash'`).Scan(&st, &until, &expired))
		return st, expired
	}
	st, _ := state()
	require.Equal(t, "PROCESSING", st, "the crash left the record PROCESSING")
	// Both leases: the record's locked_until, and the order's Redis lease, which the pay call's watchdog
	// renewed (every PAY_LEASE/3) while the platform answered, so it can outlive locked_until. A sweep
	// that meets the Redis lease leaves the record to its holder, as it should.
	rdb, err := redisx.Open(svc.RedisURL, time.Second)
	require.NoError(t, err)
	defer rdb.Close()
	locker, err := lock.New(rdb, prefix)
	require.NoError(t, err)
	lockKey := locker.LockKey(pay.LockName(orderID))
	leaseOver := func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, expired := state()
			held, err := rdb.Exists(context.Background(), lockKey).Result()
			require.NoError(t, err)
			if expired && held == 0 {
				return
			}
			require.True(t, time.Now().Before(deadline), "lease never ran out (record expired: %v, Redis lease held: %v)", expired, held == 1)
			time.Sleep(20 * time.Millisecond)
		}
	}
	leaseOver()

	// The platform down: sweep --once and reconcile --once ask, get no answer, leave the record as it
	// was, and say so in their exit status (a scheduler must see that the work is still there). A
	// refund request the sweep could not send is work left too.
	down := "PAYMENTS_URL=http://" + testenv.FreeAddr(t) // nothing listens there
	_, err = conn.Exec(context.Background(), `INSERT INTO refund_requests (order_id, payment_id, refund_no, amount_cents, reason)
		VALUES ($1, 'pay_unsent', 'refund-unsent', 100, 'test')`, orderID)
	require.NoError(t, err)
	for _, c := range []struct {
		args []string
		env  []string
		want string
	}{
		// In lab mode too: a command that serves nothing does not warn of the lab's routes.
		{[]string{"sweep", "--once"}, []string{down, "ORDERS_LAB=true"}, "did not answer for 1 stuck pay record(s): 1 stay PROCESSING for the next sweep; " +
			"the payment platform did not answer 1 refund request(s); they stay PENDING for the next sweep"},
		{[]string{"reconcile", "--once"}, []string{down, "RECONCILE_GRACE=0s"}, "reconcile: the payment platform did not answer"},
	} {
		cmd := exec.Command(bin, c.args...)
		cmd.Env = append(append([]string{}, env...), c.env...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v: %s", c.args, out)
		assert.Equal(t, 1, ee.ExitCode(), "%v", c.args)
		assert.Contains(t, string(out), c.want, "%v", c.args)
		assert.NotContains(t, string(out), ordersapp.LabWarning, "%v", c.args)
		st, _ = state()
		require.Equal(t, "PROCESSING", st, "%v: the record is left for the next run", c.args)
		leaseOver()
	}

	// The platform up, the database refusing the sweep's writes: the repair (its takeover) and the
	// refund step (the refusal it records for a payment the platform does not know) fail. That is
	// work left too, and the exit status of sweep --once and reconcile --once says so.
	restore := testenv.RefuseUpdates(t, testenv.OpenDB(t, dbURL, 0), "idempotency_keys", "refund_requests")
	failing := exec.Command(bin, "sweep", "--once")
	failing.Env = env
	fout, err := failing.CombinedOutput()
	var fe *exec.ExitError
	require.ErrorAs(t, err, &fe, "%s", fout)
	assert.Equal(t, 1, fe.ExitCode())
	assert.Contains(t, string(fout), "the repair of 1 stuck pay record(s) failed (logged above); they stay PROCESSING for a later sweep; "+
		"the refund step failed (logged above)")
	// The reconciler's repair of the record fails the same way (the order is left out: too old for
	// a 1 ms lookback).
	failing = exec.Command(bin, "reconcile", "--once")
	failing.Env = append(append([]string{}, env...), "RECONCILE_GRACE=0s", "RECONCILE_LOOKBACK=1ms")
	fout, err = failing.CombinedOutput()
	require.ErrorAs(t, err, &fe, "%s", fout)
	assert.Equal(t, 1, fe.ExitCode())
	assert.Contains(t, string(fout), "reconcile: bringing 1 unfinished pay record(s) and 0 order(s) to the platform's state failed "+
		"or went unconfirmed (logged above); the next run compares them again")
	restore()
	st, _ = state()
	require.Equal(t, "PROCESSING", st, "the failed repair wrote nothing")
	leaseOver()

	var refundStatus string
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT status FROM refund_requests WHERE refund_no = 'refund-unsent'`).
		Scan(&refundStatus))
	require.Equal(t, "PENDING", refundStatus, "the refund request is left for the next sweep")

	// Both up: the sweep repairs the record, and the platform refuses the refund of a payment it does
	// not know. A refusal is an alert a person must look at, and work left: exit 1. The next sweep,
	// before REFUND_RETRY_MIN, has nothing to do and exits 0.
	t.Logf("lease over at %s", time.Now().Format(time.RFC3339Nano))
	sweep := exec.Command(bin, "sweep", "--once")
	sweep.Env = env
	out, err := sweep.CombinedOutput()
	var re *exec.ExitError
	require.ErrorAs(t, err, &re, "%s", out)
	assert.Equal(t, 1, re.ExitCode())
	assert.Contains(t, string(out), "sweep: the payment platform refused 1 refund request(s) (alert=refund_refused above)")
	t.Logf("sweep done at %s", time.Now().Format(time.RFC3339Nano))
	st, _ = state()
	assert.Equal(t, "COMPLETED", st, "one sweep repaired the record")
	again := exec.Command(bin, "sweep", "--once")
	again.Env = env
	out, err = again.CombinedOutput()
	require.NoError(t, err, "%s", out)
	var orderStatus, paymentID string
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT status, payment_id FROM orders WHERE id = $1`, orderID).
		Scan(&orderStatus, &paymentID))
	assert.Equal(t, "PAYING", orderStatus)
	found := 0
	for _, p := range platformPayments(t, mock.URL, orderID) {
		found++
		assert.Equal(t, paymentID, p)
	}
	assert.Equal(t, 1, found, "exactly one payment at the platform")
}

func post(t *testing.T, url, key, body string) int64 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer alice-token")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", b)
	var o struct{ ID int64 }
	require.NoError(t, json.Unmarshal(b, &o))
	return o.ID
}

// platformPayments lists the ids of the platform's payments for an order, through its query API.
func platformPayments(t *testing.T, base string, orderID int64) []string {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("%s/v1/payments?merchant_order_no=%d", base, orderID))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct {
		Payments []struct{ ID string } `json:"payments"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	ids := make([]string, 0, len(out.Payments))
	for _, p := range out.Payments {
		ids = append(ids, p.ID)
	}
	return ids
}
