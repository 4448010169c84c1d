package labview

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"idemshop/internal/decisions"
	"idemshop/internal/platform/problem"
)

// events is GET /lab/events: Server-Sent Events, one decision per "data:" line (a JSON object with at
// least type and outcome), so that `curl -N` prints one line per decision. ?since=N first sends the kept
// decisions after seq N (a page that reconnects catches up); without it the stream starts now. A
// comment line every Heartbeat keeps proxies from closing an idle stream. The stream ends when the
// client goes away or the bus closes (server shutdown).
func (l *Live) events(c echo.Context) error {
	var since uint64
	haveSince := false
	// Sent twice, it is refused as a repeated header or form field is: which one was meant is a guess.
	if n := len(c.QueryParams()["since"]); n > 1 {
		return problem.New(problem.KindInvalid, "invalid_query",
			fmt.Sprintf("query parameter since is sent %d times; send it once", n))
	}
	if s := c.QueryParam("since"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return problem.New(problem.KindInvalid, "invalid_query",
				fmt.Sprintf("query parameter since must be a decision's seq, a whole number >= 0; got %q", s)).Wrap(err)
		}
		since, haveSince = n, true
	}
	sub, backlog := l.bus.Subscribe(since)
	defer sub.Close()
	if !haveSince {
		backlog = nil
	}

	w := c.Response()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	if c.Request().Method == http.MethodHead {
		// A HEAD gets the stream's headers only. Run as a stream, its writes would be dropped and never
		// fail, so it would hold the connection (and a client's next request on it) until the client left.
		return c.NoContent(http.StatusOK)
	}
	// The server's WriteTimeout is for ordinary answers; a stream lives longer. Each write below sets a
	// deadline of its own instead, so a client that stops reading is still dropped.
	write := func(s string) error {
		if err := rc.SetWriteDeadline(time.Now().Add(l.cfg.WriteTimeout)); err != nil {
			return fmt.Errorf("lab events: set write deadline: %w", err)
		}
		if _, err := w.Write([]byte(s)); err != nil {
			return fmt.Errorf("lab events: write: %w", err)
		}
		if err := rc.Flush(); err != nil {
			return fmt.Errorf("lab events: flush: %w", err)
		}
		return nil
	}
	w.WriteHeader(http.StatusOK)
	if err := write(": idemshop lab decisions\n\n"); err != nil {
		return nil // the client is gone: nothing to answer
	}
	for _, d := range backlog {
		if err := write(frame(d)); err != nil {
			return nil
		}
	}
	heartbeat := time.NewTicker(l.cfg.Heartbeat)
	defer heartbeat.Stop()
	ctx := c.Request().Context()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-heartbeat.C:
			if err := write(": heartbeat\n\n"); err != nil {
				return nil
			}
		case d, ok := <-sub.C:
			if !ok {
				return nil // the bus closed: the server is shutting down
			}
			out := ""
			if n := sub.Missed(); n > 0 {
				// This watcher was too slow and lost n decisions: say so, so the page is not trusted as complete.
				out = frame(decisions.Decision{Type: decisions.TypeMissed, Outcome: "dropped", Count: n,
					At: time.Now().UTC(), Detail: fmt.Sprintf("%d decisions were dropped: this stream was too slow", n)})
			}
			if err := write(out + frame(d)); err != nil {
				return nil
			}
		}
	}
}

// frame is one decision as an SSE event: a single data: line.
func frame(d decisions.Decision) string {
	b, err := json.Marshal(d)
	if err != nil { // a Decision always marshals; keep the stream going if it ever does not
		return ""
	}
	return "data: " + string(b) + "\n\n"
}
