package labview

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"idemshop/internal/decisions"
	"idemshop/internal/platform/retry"
	"idemshop/internal/points"
)

// metricsLimit bounds what is read of points-consumer's /metrics.
const metricsLimit = 1 << 20

// ledgerBatch is the most ledger rows reported per poll; a lab run that writes more is reported over
// the next polls.
const ledgerBatch = 500

// A ledger id is taken at INSERT and seen at COMMIT, so a row can appear below one already reported: a
// redeem's debit waiting on a lock commits after a credit that took a later id. Reading "id > the last
// one" alone never showed it. The ids passed over (holes) are read again, for holeWait, after which a
// hole is taken for a rolled-back insert (its id is never used); at most maxHoles, the newest.
const (
	holeWait = time.Minute
	maxHoles = 1000
)

// poller turns what points-consumer did, in another process, into decisions: each new points_ledger
// row is a credit, reversal or debit (the ledger is the truth: a row is written once per biz_id), and
// each rise of its idemshop_points_messages_total{outcome="duplicate"} is a message it suppressed
// (which writes no row, so only its counter knows).
type poller struct {
	live     *Live
	client   *http.Client
	lastRow  int64
	holes    map[int64]time.Time // id passed over → when
	dupes    float64
	haveDups bool

	mu     sync.Mutex
	health string
}

func (p *poller) status() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.health == "" {
		return "not polled yet"
	}
	return p.health
}

func (p *poller) setStatus(s string) {
	p.mu.Lock()
	p.health = s
	p.mu.Unlock()
}

// run polls every PollInterval until ctx ends. Rows written before it started are history, not news.
func (p *poller) run(ctx context.Context) {
	if err := p.live.db.WithContext(ctx).Raw(`SELECT coalesce(max(id), 0) FROM points_ledger`).Row().Scan(&p.lastRow); err != nil {
		p.live.logger.Debug("lab live: read the ledger's last row", "err", err)
	}
	retry.Every(ctx, p.live.cfg.PollInterval, func() {
		if err := p.ledger(ctx); err != nil && ctx.Err() == nil {
			p.live.logger.Debug("lab live: poll the points ledger", "err", err)
		}
		if p.live.cfg.PointsMetricsURL != "" {
			if err := p.suppressed(ctx); err != nil {
				p.setStatus("unreachable: " + err.Error())
			} else {
				p.setStatus("up")
			}
		}
	})
}

type ledgerRow struct {
	ID     int64
	UserID int64
	BizID  string
	Delta  int64
	Reason string
}

func (p *poller) ledger(ctx context.Context) error {
	now := time.Now()
	holes := make([]int64, 0, len(p.holes))
	for id, at := range p.holes {
		if now.Sub(at) > holeWait {
			delete(p.holes, id)
			continue
		}
		holes = append(holes, id)
	}
	var rows []ledgerRow
	if err := p.live.db.WithContext(ctx).Raw(`SELECT id, user_id, biz_id, delta, reason FROM points_ledger
		WHERE id > ? OR id IN ? ORDER BY id LIMIT ?`, p.lastRow, holes, ledgerBatch).Scan(&rows).Error; err != nil {
		return fmt.Errorf("read points ledger: %w", err)
	}
	for _, r := range rows {
		if r.ID <= p.lastRow {
			delete(p.holes, r.ID) // a late commit
		} else {
			for id := max(p.lastRow+1, r.ID-maxHoles); id < r.ID; id++ {
				p.holes[id] = now
			}
			p.lastRow = r.ID
		}
		outcome := "credited"
		switch {
		case r.Reason == points.ReasonOrderRefunded:
			outcome = "reversed"
		case r.Delta < 0:
			outcome = "debited"
		}
		var orderID int64
		if _, id, ok := strings.Cut(r.BizID, ":"); ok {
			orderID, _ = strconv.ParseInt(id, 10, 64) // order-paid:<id>, order-refunded:<id>; others have none
		}
		p.live.bus.Publish(decisions.Decision{Type: decisions.TypePoints, Outcome: outcome, UserID: r.UserID,
			OrderID: orderID, Detail: fmt.Sprintf("%s %+d", r.BizID, r.Delta)})
	}
	for id := range p.holes {
		if id <= p.lastRow-maxHoles {
			delete(p.holes, id)
		}
	}
	return nil
}

// suppressed reads points-consumer's duplicate count and reports its rise since the last read.
func (p *poller) suppressed(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.live.cfg.PointsMetricsURL, nil)
	if err != nil {
		return fmt.Errorf("points metrics: %w", err)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return fmt.Errorf("points metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("points metrics: HTTP %d", resp.StatusCode)
	}
	n, found, err := duplicateCount(io.LimitReader(resp.Body, metricsLimit))
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("points metrics: no idemshop_points_messages_total{outcome=\"duplicate\"}")
	}
	if p.haveDups && n > p.dupes {
		p.live.bus.Publish(decisions.Decision{Type: decisions.TypePoints, Outcome: "suppressed", Count: int64(n - p.dupes),
			Detail: "points-consumer dropped a redelivered message: its biz_id was already in the ledger"})
	}
	// A restarted consumer starts again at 0: take its new count as the base.
	p.dupes, p.haveDups = n, true
	return nil
}

// duplicateCount finds idemshop_points_messages_total{outcome="duplicate"} in a Prometheus text page.
func duplicateCount(r io.Reader) (float64, bool, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "idemshop_points_messages_total{") || !strings.Contains(line, `outcome="duplicate"`) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, false, fmt.Errorf("points metrics: %q: %w", line, err)
		}
		return v, true, nil
	}
	if err := sc.Err(); err != nil {
		return 0, false, fmt.Errorf("points metrics: %w", err)
	}
	return 0, false, nil
}
