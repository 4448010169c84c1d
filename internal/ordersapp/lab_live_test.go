package ordersapp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/callback"
	"idemshop/internal/decisions"
	"idemshop/internal/paymock"
	"idemshop/internal/paysig"
	"idemshop/internal/platform/config"
	"idemshop/internal/testenv"
)

func labMode(cfg *config.Orders) { cfg.Lab = true }

// stream reads GET /lab/events in the background and keeps every data: line, decoded.
type stream struct {
	mu       sync.Mutex
	comments []string
	got      []decisions.Decision
	ended    bool
}

func openStream(t *testing.T, url string) *stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*patience) // a bound for a failing run only
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	s := &stream{}
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			switch {
			case strings.HasPrefix(line, ":"):
				s.comments = append(s.comments, line)
			case strings.HasPrefix(line, "data: "):
				var d decisions.Decision
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil {
					t.Errorf("data line is not a decision: %q: %v", line, err)
				}
				s.got = append(s.got, d)
			case line != "":
				t.Errorf("unexpected line on the stream: %q", line)
			}
			s.mu.Unlock()
		}
		s.mu.Lock()
		s.ended = true
		s.mu.Unlock()
	}()
	// The first comment says the subscription exists: a decision from now on is on the stream.
	eventually(t, patience, "the stream's first line", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.comments) > 0
	})
	return s
}

// matching returns the decisions seen so far that keep.
func (s *stream) matching(keep func(decisions.Decision) bool) []decisions.Decision {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []decisions.Decision
	for _, d := range s.got {
		if keep(d) {
			out = append(out, d)
		}
	}
	return out
}

// tripleCallback creates an order for alice and sends one signed SUCCESS callback for it three times,
// the same bytes each time (the incident). It returns the event id.
func tripleCallback(t *testing.T, rp *replica) (string, int64) {
	t.Helper()
	orderID, amount := rp.newOrder("alice-token", 1, 1)
	eventID := fmt.Sprintf("evt-live-%d", time.Now().UnixNano())
	body, err := json.Marshal(callbackFor(orderID, callback.StatusSuccess, amount, eventID))
	require.NoError(t, err)
	sig := paysig.Sign(demoSecret, time.Now(), body)
	for range 3 {
		r := rp.postRaw(body, sig)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	}
	return eventID, orderID
}

func TestLabLiveIsNotMountedWithoutLabMode(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})
	for _, path := range []string{"/lab", "/lab/events", "/lab/counters", "/lab/platform/chaos"} {
		assert.Equal(t, http.StatusNotFound, rp.call(http.MethodGet, path, "", "", nil).Status, path)
	}
	assert.Equal(t, http.StatusNotFound, rp.call(http.MethodPost, "/lab/earn", "", "", []byte(`{"user":"alice"}`)).Status)
}

// The incident on the event stream: three copies of one callback are one applied and two duplicates,
// each with its copy number, and the order's Idempotency-Key request is there too.
func TestLabLiveStreamsTheTripleCallback(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{cfg: labMode})
	s := openStream(t, rp.srv.URL+"/lab/events")

	eventID, orderID := tripleCallback(t, rp)
	ofEvent := func(d decisions.Decision) bool { return d.Type == decisions.TypeCallback && d.EventID == eventID }
	eventually(t, patience, "three callback decisions on the stream", func() bool { return len(s.matching(ofEvent)) >= 3 })

	got := s.matching(ofEvent)
	require.Len(t, got, 3)
	outcomes := map[string]int{}
	for i, d := range got {
		outcomes[d.Outcome]++
		assert.Equal(t, orderID, d.OrderID)
		assert.Equal(t, i+1, d.Copy, "copy numbers count the deliveries of one event id")
		assert.Equal(t, "guarded", d.Guard)
	}
	assert.Equal(t, map[string]int{"applied": 1, "duplicate": 2}, outcomes)
	assert.Equal(t, "applied", got[0].Outcome, "sent one after the other, the first copy applies")
	assert.NotEmpty(t, s.matching(func(d decisions.Decision) bool {
		return d.Type == decisions.TypeIdempotency && d.Route == "/v1/orders" && d.Outcome == "executed"
	}), "the order's Idempotency-Key request")

	// A page that opens late gets the kept decisions with ?since.
	late := openStream(t, rp.srv.URL+"/lab/events?since=0")
	eventually(t, patience, "the backlog on a late stream", func() bool { return len(late.matching(ofEvent)) == 3 })

	// A partial refund is recorded: no status changes.
	body, err := json.Marshal(callbackFor(orderID, callback.StatusRefunded, 1, eventID+"-refund"))
	require.NoError(t, err)
	r := rp.postRaw(body, paysig.Sign(demoSecret, time.Now(), body))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

	// The counters say the same: 4 received, 1 applied, 2 duplicates, 1 recorded (of this test's own
	// database): the outcomes add up to what was received (recorded was left out until a newcomer
	// counted).
	r = rp.call(http.MethodGet, "/lab/counters", "", "", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var cs struct {
		Callbacks struct{ Received, Applied, Duplicate, Stale, Recorded, Rejected int64 } `json:"callbacks"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &cs))
	assert.Equal(t, int64(4), cs.Callbacks.Received)
	assert.Equal(t, int64(1), cs.Callbacks.Applied)
	assert.Equal(t, int64(2), cs.Callbacks.Duplicate)
	assert.Equal(t, int64(1), cs.Callbacks.Recorded)
	c := cs.Callbacks
	assert.Equal(t, c.Received, c.Applied+c.Duplicate+c.Stale+c.Recorded+c.Rejected)
}

// Earn: 100 points through the ledger, for the redeem block.
func TestLabLiveEarnCreditsPoints(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{cfg: labMode})
	r := rp.call(http.MethodPost, "/lab/earn", "", "", []byte(`{"user":"alice"}`))
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	assert.Equal(t, int64(100), balanceOf(t, env.DB, redeemAlice))
	assert.Equal(t, http.StatusNotFound, rp.call(http.MethodPost, "/lab/earn", "", "", []byte(`{"user":"nobody"}`)).Status)
	assert.Equal(t, http.StatusBadRequest, rp.call(http.MethodPost, "/lab/earn", "", "", []byte(`{`)).Status)
	// Valid JSON that says too little, or more than the route reads, is refused for what it is, and
	// nothing is credited.
	for body, want := range map[string][2]string{
		`{}`:                            {"validation_failed", `user is required: a user's name, e.g. {"user":"alice"}`},
		`{"user":""}`:                   {"validation_failed", `user is required: a user's name, e.g. {"user":"alice"}`},
		`{"user":"alice","points":1e6}`: {"malformed_body", `unknown field "points" (names are case-sensitive)`},
		`{"User":"alice"}`:              {"malformed_body", `unknown field "User" (names are case-sensitive)`},
	} {
		p := rp.call(http.MethodPost, "/lab/earn", "", "", []byte(body)).problem(t)
		assert.Equal(t, want[0], p.Code, body)
		assert.Equal(t, want[1], p.Detail, body)
	}
	assert.Equal(t, int64(100), balanceOf(t, env.DB, redeemAlice), "nothing more credited")
}

// payments-mock with an ADMIN_TOKEN that orders was not given: the controls say which setting of
// orders is missing, instead of passing on the mock's own 401 (its variable, its path).
func TestLabLivePlatformControlsNameTheMissingToken(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	mock := newMock(t, func(c *paymock.Config) { c.AdminToken = "s3cret" })
	controls := func(token string) *replica {
		return newReplica(t, env, replicaOpts{cfg: func(cfg *config.Orders) {
			labMode(cfg)
			payTo(mock, 10*time.Second)(cfg)
			cfg.PaymentsAdminToken = token
		}})
	}
	without := controls("")
	for _, call := range [][2]string{{http.MethodGet, "/lab/platform/chaos"}, {http.MethodPut, "/lab/platform/chaos"}, {http.MethodPost, "/lab/platform/replay"}} {
		body := []byte(`{}`)
		if call[0] == http.MethodGet {
			body = nil
		}
		p := without.call(call[0], call[1], "", "", body).problem(t)
		assert.Equal(t, http.StatusServiceUnavailable, p.Status, call[1])
		assert.Equal(t, "payments_mock_unauthorized", p.Code, call[1])
		assert.Equal(t, "payments-mock refused orders' admin token: set PAYMENTS_ADMIN_TOKEN on orders to payments-mock's ADMIN_TOKEN", p.Detail)
		assert.Equal(t, call[1], p.Instance, "the shop's own path")
	}
	assert.Equal(t, http.StatusOK, controls("s3cret").call(http.MethodGet, "/lab/platform/chaos", "", "", nil).Status)
}

// The page's platform controls reach payments-mock through orders: set chaos, replay the newest
// payment's last event three times, and see the three copies decided on the stream.
func TestLabLivePlatformControls(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	mock := newMock(t, func(c *paymock.Config) { c.AutoApproveDelay = 20 * time.Millisecond })
	rp := newReplica(t, env, replicaOpts{cfg: func(cfg *config.Orders) {
		labMode(cfg)
		payTo(mock, 10*time.Second)(cfg)
	}})
	r := rp.call(http.MethodPut, "/lab/platform/chaos", "", "", []byte(`{"duplicates":1,"parallel":false}`))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Contains(t, string(r.Body), `"duplicates":1`)
	r = rp.call(http.MethodPut, "/lab/platform/chaos", "", "", []byte(`{"duplicates":99}`))
	assert.Equal(t, http.StatusBadRequest, r.Status, "payments-mock's own validation answers: %s", r.Body)
	assert.Equal(t, "/lab/platform/chaos", r.problem(t).Instance, "the request's own path, not the mock's")
	r = rp.call(http.MethodPost, "/lab/platform/replay", "", "", []byte(`{"times":2,"payment_id":"pay_nope"}`))
	assert.Equal(t, http.StatusNotFound, r.Status, "%s", r.Body)
	assert.Equal(t, "payment_not_found", r.problem(t).Code)
	assert.Equal(t, "/lab/platform/replay", r.problem(t).Instance)

	s := openStream(t, rp.srv.URL+"/lab/events")
	orderID, _ := rp.newOrder("alice-token", 1, 1)
	require.Equal(t, http.StatusCreated, rp.pay("alice-token", orderID, "live-pay").Status)
	applied := func(d decisions.Decision) bool {
		return d.Type == decisions.TypeCallback && d.OrderID == orderID && d.Outcome == "applied"
	}
	eventually(t, patience, "the payment's own callback", func() bool { return len(s.matching(applied)) > 0 })
	assert.NotEmpty(t, s.matching(func(d decisions.Decision) bool {
		return d.Type == decisions.TypePayRecord && d.OrderID == orderID && d.Outcome == "COMPLETED"
	}), "the pay record's transition")

	r = rp.call(http.MethodPost, "/lab/platform/replay", "", "", []byte(`{"times":3,"parallel":false}`))
	require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
	dup := func(d decisions.Decision) bool {
		return d.Type == decisions.TypeCallback && d.OrderID == orderID && d.Outcome == "duplicate"
	}
	eventually(t, patience, "three replayed copies decided", func() bool { return len(s.matching(dup)) >= 3 })
}

// A headless browser opens /lab, then the triple callback happens, and the page shows it without a
// reload: "1 applied, 2 duplicate" for that event.
func TestBrowserLabShowsTheTripleCallbackLive(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{cfg: labMode})

	ctx := startBrowser(t, chromium, 1400, 1000)

	// The page is open and its stream connected before anything happens: what it shows next can only
	// have come live.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(rp.srv.URL+"/lab"),
		chromedp.WaitVisible(chromedp.CSS("#status.live")),
	), "open /lab")
	eventID, _ := tripleCallback(t, rp)

	sel := fmt.Sprintf(`#by-event tr[data-event=%q] td.outcomes`, eventID)
	var shown string
	eventually(t, patience, "the page to show the triple callback", func() bool {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(
			`(() => { const e = document.querySelector(%q); return e ? e.textContent : ""; })()`, sel)))
		if err != nil {
			t.Logf("evaluate: %v", err)
			return false
		}
		shown = v
		return v == "1 applied, 2 duplicate"
	})
	assert.Equal(t, "1 applied, 2 duplicate", shown)
	copies, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(fmt.Sprintf(`#by-event tr[data-event=%q] td.copies`, eventID))))
	require.NoError(t, err)
	assert.Equal(t, "3", strings.TrimSpace(copies))
	eventually(t, patience, "the counters to catch up", func() bool {
		v, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("cb-received")))
		return err == nil && strings.TrimSpace(v) == "3"
	})

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	shot := filepath.Join(artifactDir(t), "lab-live-triple-callback.png")
	require.NoError(t, os.WriteFile(shot, png, 0o644))
	t.Logf("screenshot: %s", shot)
}
