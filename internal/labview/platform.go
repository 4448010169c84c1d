package labview

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"idemshop/internal/platform/httpproblem"
	"idemshop/internal/platform/problem"
	"idemshop/internal/points"
)

// answerLimit bounds what is read of payments-mock's answers (GET /admin/payments grows with the run).
const answerLimit = 8 << 20

// errPlatform is payments-mock not answering the page's controls.
var errPlatform = problem.New(problem.KindUnavailable, "payments_mock_unavailable",
	"payments-mock's admin API did not answer; is it running, at PAYMENTS_URL?")

// errPlatformToken is payments-mock refusing orders' admin token: its own 401 names its ADMIN_TOKEN and
// its own path, neither of which the page's user can act on; what is wrong is orders' setting.
var errPlatformToken = problem.New(problem.KindUnavailable, "payments_mock_unauthorized",
	"payments-mock refused orders' admin token: set PAYMENTS_ADMIN_TOKEN on orders to payments-mock's ADMIN_TOKEN")

// admin calls payments-mock's admin API and returns its status and body.
func (l *Live) admin(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(l.cfg.PaymentsURL, "/")+path, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("lab platform: %w", err)
	}
	if body != nil {
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	}
	if l.cfg.PaymentsAdminToken != "" {
		req.Header.Set(echo.HeaderAuthorization, "Bearer "+l.cfg.PaymentsAdminToken)
	}
	resp, err := l.client.Do(req)
	if err != nil {
		return 0, nil, errPlatform.Wrap(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, answerLimit))
	if err != nil {
		return 0, nil, errPlatform.Wrap(err)
	}
	if resp.StatusCode == http.StatusUnauthorized {
		return 0, nil, errPlatformToken
	}
	return resp.StatusCode, b, nil
}

// relay answers with payments-mock's own status and body: its problem documents already say what went
// wrong. A problem's instance names the mock's admin path, which the page's user never asked for: it
// becomes this request's own path (RFC 9457 §3.1.5), as on every other route of orders.
func relay(c echo.Context, status int, body []byte) error {
	if status < 400 {
		return c.Blob(status, echo.MIMEApplicationJSON, body)
	}
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		return errPlatform.WithDetail(fmt.Sprintf("payments-mock answered %d with a body that is not a problem document", status)).Wrap(err)
	}
	doc["instance"] = httpproblem.Instance(c.Request().URL)
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return c.Blob(status, httpproblem.ContentType, b)
}

func (l *Live) getChaos(c echo.Context) error {
	st, b, err := l.admin(c.Request().Context(), http.MethodGet, "/admin/chaos", nil)
	if err != nil {
		return err
	}
	return relay(c, st, b)
}

// putChaos forwards a chaos patch; payments-mock validates it.
func (l *Live) putChaos(c echo.Context) error {
	body, err := httpproblem.ReadBody(c.Request().Body)
	if err != nil {
		return err
	}
	if !json.Valid(body) {
		return problem.ErrMalformedBody
	}
	st, b, err := l.admin(c.Request().Context(), http.MethodPut, "/admin/chaos", body)
	if err != nil {
		return err
	}
	return relay(c, st, b)
}

// replayRequest is POST /lab/platform/replay. PaymentID empty: the newest payment.
type replayRequest struct {
	PaymentID string `json:"payment_id"`
	Times     int    `json:"times"`
	Parallel  *bool  `json:"parallel,omitempty"`
}

// replay resends a payment's last event times times ("the incident on demand").
func (l *Live) replay(c echo.Context) error {
	body, err := httpproblem.ReadBody(c.Request().Body)
	if err != nil {
		return err
	}
	var req replayRequest
	if err := problem.DecodeJSON(body, &req); err != nil { // as every other route: exact names, nothing unknown
		return err
	}
	ctx := c.Request().Context()
	if req.PaymentID == "" {
		st, b, err := l.admin(ctx, http.MethodGet, "/admin/payments", nil)
		if err != nil {
			return err
		}
		if st != http.StatusOK {
			return relay(c, st, b)
		}
		var recs struct {
			Payments []struct {
				ID string `json:"id"`
			} `json:"payments"`
		}
		if err := json.Unmarshal(b, &recs); err != nil {
			return errPlatform.Wrap(err)
		}
		if len(recs.Payments) == 0 {
			return problem.New(problem.KindNotFound, "no_payment", "payments-mock has no payment to replay yet: pay an order first")
		}
		req.PaymentID = recs.Payments[len(recs.Payments)-1].ID
	}
	fwd, err := json.Marshal(struct {
		Times    int   `json:"times"`
		Parallel *bool `json:"parallel,omitempty"`
	}{req.Times, req.Parallel})
	if err != nil {
		return err
	}
	st, b, err := l.admin(ctx, http.MethodPost, "/admin/payments/"+url.PathEscape(req.PaymentID)+"/replay", fwd)
	if err != nil {
		return err
	}
	return relay(c, st, b)
}

// earnPoints is what the page's "earn" button credits.
const earnPoints = 100

// earn is POST /lab/earn {"user":"alice"}: 100 points for a user, so the redeem block has something to
// spend. It is a lab-only credit through the ledger's own transaction (a ledger row with a unique
// biz_id "lab-earn:<uuid>" and the balance, together), not a paid order: the real path needs a
// product priced at 100 points, payments-mock, its callback and points-consumer all running, and a
// trainer's button should not depend on five processes to show one number.
func (l *Live) earn(c echo.Context) error {
	body, err := httpproblem.ReadBody(c.Request().Body)
	if err != nil {
		return err
	}
	var req struct {
		User string `json:"user"`
	}
	if err := problem.DecodeJSON(body, &req); err != nil {
		return err
	}
	if req.User == "" {
		return problem.New(problem.KindInvalid, "validation_failed", `user is required: a user's name, e.g. {"user":"alice"}`)
	}
	ctx := c.Request().Context()
	var ids []int64
	if err := l.db.WithContext(ctx).Raw(`SELECT id FROM users WHERE name = ?`, req.User).Scan(&ids).Error; err != nil {
		return err
	}
	if len(ids) == 0 {
		return problem.New(problem.KindNotFound, "unknown_user", "no such user")
	}
	bizID := "lab-earn:" + uuid.NewString()
	if _, err := l.ledger.Apply(ctx, []points.Credit{{BizID: bizID, UserID: ids[0], Delta: earnPoints, Reason: "lab_earn"}}); err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, map[string]any{"user": req.User, "biz_id": bizID, "delta": earnPoints})
}
