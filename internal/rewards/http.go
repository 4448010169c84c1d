package rewards

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"time"

	"github.com/labstack/echo/v4"

	"idemshop/internal/auth"
	"idemshop/internal/formtoken"
	"idemshop/internal/platform/httpproblem"
	"idemshop/internal/platform/logging"
	"idemshop/internal/platform/postgres"
	"idemshop/internal/platform/problem"
)

// FormTokenHeader carries the token on the JSON API; the HTML form sends the field FormTokenField.
const (
	FormTokenHeader = "Form-Token"
	FormTokenField  = "form_token"
)

// View renders the HTML answers of a browser form post (internal/web implements it).
type View interface {
	// RedeemDone shows the coupon a submit bought (or, replayed, had bought).
	RedeemDone(c echo.Context, a Answer) error
	// RedeemFailed shows why a submit was refused, with status and Retry-After from pe. tokenID and
	// rewardID are what was posted, so a form still usable (too few points) can be offered again.
	RedeemFailed(c echo.Context, pe *problem.Error, tokenID, rewardID string) error
}

// Handler serves POST /v1/rewards/redeem.
type Handler struct {
	svc  *Service
	view View
	// formWait is how long a browser form post waits for an in-flight first submit (see WaitForResult).
	formWait time.Duration
}

// NewHandler returns the redeem route.
func NewHandler(svc *Service, view View, formWait time.Duration) (*Handler, error) {
	if svc == nil || view == nil {
		return nil, errors.New("rewards: NewHandler needs a service and a view")
	}
	return &Handler{svc: svc, view: view, formWait: formWait}, nil
}

// Mount adds the route to g, which must already authenticate.
func (h *Handler) Mount(g *echo.Group) {
	g.POST("/rewards/redeem", h.redeem)
}

type redeemRequest struct {
	Reward string `json:"reward"`
}

// IsFormPost reports whether the request is an HTML form submission. Those get HTML answers; every
// other request (JSON) gets JSON answers and RFC 9457 problems. Content-Type decides, not Accept: it is
// what a browser without JavaScript reliably sends, and a JSON client cannot send it by accident.
func IsFormPost(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get(echo.HeaderContentType))
	return err == nil && (mt == echo.MIMEApplicationForm || mt == echo.MIMEMultipartForm)
}

// redeem is POST /v1/rewards/redeem. JSON: body {"reward":"coupon-10"} and header Form-Token. HTML form:
// fields reward and form_token. 201 {"coupon":{"id","code","reward"},"balance"}; a replay adds
// Idempotent-Replayed: true.
func (h *Handler) redeem(c echo.Context) error {
	u, err := auth.MustUser(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if IsFormPost(c.Request()) {
		tokenID, rewardID, err := formFields(c.Request())
		if err != nil {
			return h.view.RedeemFailed(c, httpproblem.Resolve(err), "", "")
		}
		a, err := h.svc.WaitForResult(ctx, u.ID, tokenID, rewardID, h.formWait)
		if err != nil {
			// Resolved and logged as the error handler does a JSON request's error, so that a failure
			// that says only "not now" (a lost connection) is the HTML 503 with Retry-After, not the error
			// handler's problem JSON (a helper's finding, 2026-12-07: 16 of 16 lost COMMITs), and its log
			// line says why.
			pe := httpproblem.ResolveTranslated(err, postgres.TranslateError)
			if pe.Kind == problem.KindInternal {
				return err // logged with its cause by the error handler, like on the JSON path
			}
			httpproblem.Log(logging.From(ctx), pe, err)
			return h.view.RedeemFailed(c, pe, tokenID, rewardID)
		}
		return h.view.RedeemDone(c, a)
	}

	body, err := httpproblem.ReadBody(c.Request().Body)
	if err != nil {
		return fmt.Errorf("read request body: %w", err)
	}
	var req redeemRequest
	if err := problem.DecodeJSON(body, &req); err != nil {
		return err
	}
	// Two tokens would be one submit with the first taken and the other ignored, as two Idempotency-Key
	// lines would be: refused the same way.
	tokens := c.Request().Header.Values(FormTokenHeader)
	if len(tokens) > 1 {
		return formtoken.ErrTokenInvalid.WithDetail(fmt.Sprintf("%s sent %d times", FormTokenHeader, len(tokens)))
	}
	a, err := h.svc.Redeem(ctx, u.ID, c.Request().Header.Get(FormTokenHeader), req.Reward)
	if err != nil {
		return err
	}
	if a.Replayed {
		c.Response().Header().Set("Idempotent-Replayed", "true")
	}
	return c.Blob(http.StatusCreated, echo.MIMEApplicationJSON, a.Body)
}

// formFields reads the two fields of a browser form post from its body (httpproblem.ReadForm, which
// refuses a body it cannot read or decode), and refuses a field sent twice (400 malformed_body).
func formFields(r *http.Request) (tokenID, rewardID string, err error) {
	var form url.Values
	form, err = httpproblem.ReadForm(r)
	if err != nil {
		return "", "", err
	}
	field := func(name string) (string, error) {
		vs := form[name]
		if len(vs) > 1 {
			return "", problem.ErrMalformedBody.WithDetail(fmt.Sprintf("field %q sent %d times", name, len(vs)))
		}
		if len(vs) == 0 {
			return "", nil // as FormValue: the service refuses a missing token or reward with its own code
		}
		return vs[0], nil
	}
	if tokenID, err = field(FormTokenField); err != nil {
		return "", "", err
	}
	rewardID, err = field("reward")
	return tokenID, rewardID, err
}
