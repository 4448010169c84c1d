package labview_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/decisions"
	"idemshop/internal/labview"
	"idemshop/internal/platform/httpserver"
	"idemshop/internal/testenv"
)

// patience bounds a wait that normally takes milliseconds; it is a deadline for a failure only.
const patience = time.Minute

// A stream that outlives the server's WriteTimeout, sends heartbeats, and ends when the server shuts
// down: graceful shutdown does not wait ShutdownTimeout for it.
func TestEventStreamHeartbeatsAndEndsOnShutdown(t *testing.T) {
	env := testenv.New(t)
	bus := decisions.NewBus(10, 10)
	cfg := labview.DefaultConfig()
	cfg.PaymentsURL = "http://127.0.0.1:1" // never called here
	cfg.Heartbeat = 20 * time.Millisecond
	cfg.PollInterval = 10 * time.Millisecond
	live, err := labview.New(bus, env.DB, cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	e := httpserver.New(slog.New(slog.DiscardHandler), prometheus.NewRegistry(), 1<<20)
	live.Mount(e)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() {
		served <- httpserver.Serve(ctx, ln, e, httpserver.Config{ReadHeaderTimeout: time.Second, ReadTimeout: time.Second,
			WriteTimeout: 200 * time.Millisecond, IdleTimeout: time.Second, ShutdownTimeout: patience})
	}()
	ran := make(chan struct{})
	go func() { live.Run(ctx); close(ran) }()

	resp, err := http.Get("http://" + ln.Addr().String() + "/lab/events")
	require.NoError(t, err)
	defer resp.Body.Close()
	var mu sync.Mutex
	var lines []string
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
		}
	}()
	has := func(pred func(string) bool) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range lines {
			if pred(l) {
				return true
			}
		}
		return false
	}
	waitFor(t, "the stream to open", func() bool { return has(func(l string) bool { return strings.HasPrefix(l, ": idemshop") }) })

	// Past the server's WriteTimeout (200 ms), the stream still carries decisions and heartbeats.
	time.Sleep(300 * time.Millisecond) // the duration under test: longer than WriteTimeout
	bus.Publish(decisions.Decision{Type: decisions.TypeFence, Outcome: "refused"})
	waitFor(t, "the decision after WriteTimeout", func() bool {
		return has(func(l string) bool {
			return strings.HasPrefix(l, "data: ") && strings.Contains(l, `"outcome":"refused"`)
		})
	})
	waitFor(t, "a heartbeat", func() bool { return has(func(l string) bool { return l == ": heartbeat" }) })

	start := time.Now()
	stop()
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(patience):
		t.Fatal("graceful shutdown waited on the open stream")
	}
	assert.Less(t, time.Since(start), 10*time.Second, "shutdown is prompt, not ShutdownTimeout")
	<-ran
	select {
	case <-ended:
	case <-time.After(patience):
		t.Fatal("the client's stream did not end")
	}
}

func TestSinceMustBeANumber(t *testing.T) {
	assertInvalidQuery(t, serveLive(t)+"/lab/events?since=x",
		`query parameter since must be a decision's seq, a whole number >= 0; got "x"`)
}

// since=1&since=2 was answered from the first (a newcomer's, 2026-12-06), where every other input the
// shop takes refuses a repeat.
func TestSinceSentTwiceIsRefused(t *testing.T) {
	assertInvalidQuery(t, serveLive(t)+"/lab/events?since=1&since=2", "query parameter since is sent 2 times; send it once")
}

func assertInvalidQuery(t *testing.T, url, detail string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	var p struct{ Code, Detail string }
	require.NoError(t, json.Unmarshal(body, &p), "%s", body)
	assert.Equal(t, "invalid_query", p.Code)
	assert.Equal(t, detail, p.Detail)
}

// A HEAD on the stream answers its headers and ends, so the connection serves the next request: run as
// the stream, it would hold the connection until the client left.
func TestHeadOnTheStreamAnswersAndEnds(t *testing.T) {
	base := serveLive(t)

	// One connection for both requests: the second is sent on the connection the HEAD used.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1}}
	t.Cleanup(client.CloseIdleConnections)
	head, err := client.Head(base + "/lab/events")
	require.NoError(t, err)
	_ = head.Body.Close()
	assert.Equal(t, http.StatusOK, head.StatusCode)
	assert.Equal(t, "text/event-stream", head.Header.Get("Content-Type"))
	next, err := client.Get(base + "/lab/events?since=x")
	require.NoError(t, err, "the request after the HEAD is answered")
	_, _ = io.Copy(io.Discard, next.Body)
	_ = next.Body.Close()
	assert.Equal(t, http.StatusBadRequest, next.StatusCode)
}

// serveLive serves a lab view (its platform never called) on a loopback port until the test ends, and
// returns its base URL.
func serveLive(t *testing.T) string {
	t.Helper()
	env := testenv.New(t)
	cfg := labview.DefaultConfig()
	cfg.PaymentsURL = "http://127.0.0.1:1"
	live, err := labview.New(decisions.NewBus(1, 1), env.DB, cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	e := httpserver.New(slog.New(slog.DiscardHandler), prometheus.NewRegistry(), 1<<20)
	live.Mount(e)
	srv := &http.Server{Handler: e, ReadHeaderTimeout: time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A ledger row that commits after a row with a higher id (a redeem's debit waiting on a lock while a
// credit commits) is shown: the poller reads the ids it passed over again. It read "id > the last
// one" only, and the debit never showed (a helper's finding, 2026-12-06).
func TestALedgerRowCommittedLateIsShown(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	bus := decisions.NewBus(100, 100)
	cfg := labview.DefaultConfig()
	cfg.PaymentsURL = "http://127.0.0.1:1" // never called here
	cfg.PollInterval = 10 * time.Millisecond
	live, err := labview.New(bus, env.DB, cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { live.Run(ctx); close(ran) }()
	t.Cleanup(func() { stop(); <-ran })
	shown := func(bizID string) bool {
		for _, d := range bus.Recent(0) {
			if strings.HasPrefix(d.Detail, bizID+" ") {
				return true
			}
		}
		return false
	}
	// The poller is running once a row written after its start is shown (rows before it are history).
	markers := 0
	require.Eventually(t, func() bool {
		for i := range markers {
			if shown(fmt.Sprintf("marker-%d", i)) {
				return true
			}
		}
		require.NoError(t, env.DB.Exec(`INSERT INTO points_ledger (user_id, biz_id, delta, reason) VALUES (1, ?, 5, 'test')`,
			fmt.Sprintf("marker-%d", markers)).Error)
		markers++
		return false
	}, patience, 20*time.Millisecond)

	late := env.DB.Begin()
	t.Cleanup(func() { late.Rollback() })
	require.NoError(t, late.Exec(`INSERT INTO points_ledger (user_id, biz_id, delta, reason) VALUES (1, 'late', -5, 'test')`).Error)
	require.NoError(t, env.DB.Exec(`INSERT INTO points_ledger (user_id, biz_id, delta, reason) VALUES (1, 'early', 5, 'test')`).Error)
	require.Eventually(t, func() bool { return shown("early") }, patience, 5*time.Millisecond)
	require.NoError(t, late.Commit().Error)
	require.Eventually(t, func() bool { return shown("late") }, 10*time.Second, 5*time.Millisecond, "the late row shown")
	n := 0
	for _, d := range bus.Recent(0) {
		if strings.HasPrefix(d.Detail, "late ") {
			n++
		}
	}
	assert.Equal(t, 1, n, "shown once")
}
