package rewards

import (
	"bytes"
	"errors"
	"fmt"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"time"

	"github.com/labstack/echo/v4"

	"idemshop/internal/auth"
	"idemshop/internal/formtoken"
	"idemshop/internal/platform/httpproblem"
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
			pe := httpproblem.Resolve(err)
			if pe.Kind == problem.KindInternal {
				return err // logged with its cause by the error handler, like on the JSON path
			}
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

// formFields reads the two fields of a browser form post from its body, and refuses what c.FormValue
// would let through in silence: a body that grows past the limit as it is read (413 body_too_large; one
// whose Content-Length is over it never reaches the route) or is cut short (400 body_unreadable), a
// body that is not valid form encoding, and a field sent twice (400 malformed_body). FormValue dropped
// the parse error and took what it had read: a token cut off by the limit read as form_token_invalid,
// and a body with a broken %-escape after the fields went through and bought a coupon.
func formFields(r *http.Request) (tokenID, rewardID string, err error) {
	body, err := httpproblem.ReadBody(r.Body)
	if err != nil {
		return "", "", fmt.Errorf("read form body: %w", err)
	}
	// The body is in memory and under the limit now, so what fails a parser below is the encoding alone.
	// The fields come from the body only, never the URL's query (where a token would reach the logs).
	// (Request.ParseMultipartForm would parse the query too, and fail a good body for a bad query.)
	var form url.Values
	if mt, params, _ := mime.ParseMediaType(r.Header.Get(echo.HeaderContentType)); mt == echo.MIMEMultipartForm {
		var mf *multipart.Form
		if mf, err = multipart.NewReader(bytes.NewReader(body), params["boundary"]).ReadForm(int64(len(body)) + 1); err == nil {
			form = mf.Value
			// A part with a file name is a file, not a value: ReadForm keeps it apart, so that a field
			// sent once as a value and once as a file would pass as sent once. Such a part counts.
			for name, files := range mf.File {
				for range files {
					form[name] = append(form[name], "")
				}
			}
			_ = mf.RemoveAll() // a file part is held in memory (the body is), so there is nothing on disk
		}
	} else {
		form, err = url.ParseQuery(string(body))
	}
	if err != nil {
		return "", "", problem.ErrMalformedBody.WithDetail("the form body is not valid form encoding").Wrap(err)
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
