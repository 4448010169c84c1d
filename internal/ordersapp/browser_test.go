package ordersapp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/testenv"
)

// chromiumPath finds Debian's chromium. A missing browser fails the test (it is part of the suite, and
// .ci/run installs it); only `go test -short` skips it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("browser test skipped under -short")
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	t.Fatal("chromium is not installed: the browser test needs Debian's chromium " +
		"(apt-get update && apt-get install -y chromium; .ci/run does this), or run go test -short")
	return ""
}

// artifactDir is where the test keeps files worth looking at after a run: $TEST_ARTIFACTS, or the
// test's temporary directory.
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("TEST_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

// A real browser, JavaScript not needed by the page: log in as alice, open the redeem form, double-click
// its submit button fast. The browser sends the form twice; one coupon is bought, and the page shows it.
func TestBrowserRedeemDoubleClick(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	env := testenv.New(t)
	rp := newReplica(t, env, replicaOpts{})
	credit(t, env.DB, redeemAlice, 100)

	// Count the redeem posts that reach the server, and hold the first one until the second arrives (at
	// most patience, a bound for a failing run only): a slow network, so the second click surely lands
	// while the first submit is pending, however slowly the browser gets to it.
	var posts atomic.Int64
	second := make(chan struct{})
	var secondOnce sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/rewards/redeem" {
			if posts.Add(1) == 1 {
				select {
				case <-second:
				case <-time.After(patience):
				}
			} else {
				secondOnce.Do(func() { close(second) })
			}
		}
		rp.app.Echo.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	ctx := startBrowser(t, chromium, 1000, 900)

	err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/login"),
		chromedp.WaitVisible(chromedp.ID("login-alice")),
		chromedp.Click(chromedp.ID("login-alice")),
		chromedp.WaitVisible(chromedp.ID("balance")), // the storefront, logged in
		chromedp.Navigate(srv.URL+"/redeem"),
		chromedp.WaitVisible(chromedp.ID("redeem-submit")),
	)
	require.NoError(t, err, "log in and open /redeem")
	// Where the button is, so that the two clicks below are plain input events: after the first one the
	// page is navigating away, and a DOM query for the second could race with that.
	center := func(axis string) float64 {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`(() => {
			const r = document.getElementById('redeem-submit').getBoundingClientRect();
			return `+axis+`; })()`))
		require.NoError(t, err)
		return v
	}
	x, y := center("r.left + r.width / 2"), center("r.top + r.height / 2")

	// A double-click is two press/release pairs, the second with click count 2. The second comes once
	// the first submit reached the server: two clicks inside one event-loop turn would only replace the
	// browser's planned navigation, and the server would never see a double submit.
	require.NoError(t, chromedp.Do(ctx, chromedp.MouseClickXY(x, y)), "first click")
	eventually(t, patience, "the first submit to reach the server", func() bool { return posts.Load() >= 1 })
	err = chromedp.Do(ctx,
		chromedp.MouseClickXY(x, y, chromedp.ClickCount(2)),
		chromedp.WaitVisible(chromedp.ID("coupon-code")),
	)
	require.NoError(t, err, "double-click submit and wait for the result page")
	code, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("coupon-code")))
	require.NoError(t, err)
	page, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("main")))
	require.NoError(t, err)
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100 means PNG
	require.NoError(t, err)

	shot := filepath.Join(artifactDir(t), "redeem-double-click.png")
	require.NoError(t, os.WriteFile(shot, png, 0o644))
	t.Logf("screenshot: %s", shot)
	t.Logf("redeem posts received: %d", posts.Load())

	// The invariant on the database: the double submit bought one coupon and debited once.
	eventually(t, patience, "the redeem to settle", func() bool {
		return count(t, env.DB, "points_ledger", "biz_id LIKE 'redeem:%'") >= 1
	})
	assertRedeemed(t, env.DB, redeemAlice, 1, 90)
	var dbCode string
	require.NoError(t, env.DB.Raw(`SELECT code FROM coupons WHERE user_id = ?`, redeemAlice).Scan(&dbCode).Error)
	assert.Equal(t, dbCode, strings.TrimSpace(code), "the page shows the coupon that was bought")
	assert.Contains(t, page, `id="balance">90<`)
	assert.Equal(t, int64(2), posts.Load(), "the browser submitted the form twice")
}

// startBrowser starts a headless chromium of width×height pixels for t and returns a context for its
// steps, 90 s at most. The first call starts the browser, and the browser lives as long as that call's
// context: so no timeout there, and the deadline on every step after it.
func startBrowser(t *testing.T, chromium string, width, height int) context.Context {
	t.Helper()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, height),
	)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancelBrowser)
	require.NoError(t, chromedp.Do(bctx), "start chromium")
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}
