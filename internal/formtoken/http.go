package formtoken

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/labstack/echo/v4"

	"idemshop/internal/auth"
	"idemshop/internal/platform/httpproblem"
	"idemshop/internal/platform/problem"
)

// Problem codes of the form-token routes.
var (
	// ErrUnknownForm is a POST /v1/form-tokens for a form the server does not have.
	ErrUnknownForm = problem.New(problem.KindInvalid, "unknown_form", "no form with that name")
	// ErrFormMissing is a POST /v1/form-tokens whose body names no form ({} or "form":""): the same
	// code, with a detail that says what is missing rather than that an unnamed form is unknown.
	ErrFormMissing = problem.New(problem.KindInvalid, "unknown_form", `the body names no form: send {"form":"redeem"}`)
	// ErrTokenInvalid is the answer to a submit whose token is missing, unknown, expired, another
	// user's or another form's. Nothing was written.
	ErrTokenInvalid = problem.New(problem.KindInvalid, "form_token_invalid",
		"the form token is missing, unknown, expired, or not yours for this form; reload the form")
	// ErrTokenInUse answers a submit while an earlier submit of the same token is still running.
	ErrTokenInUse = problem.New(problem.KindConflict, "form_token_in_use",
		"this form is already being submitted; retry shortly to get its result")
	// ErrStoreUnavailable is Redis being down: without the token store a submit cannot be told apart
	// from its duplicate, so the submit is refused before anything is written.
	ErrStoreUnavailable = problem.New(problem.KindUnavailable, "unavailable",
		"the form token store is unavailable; retry later").WithRetryAfter(2 * time.Second)
)

// Handler serves POST /v1/form-tokens.
type Handler struct {
	store *Store
	forms []string
}

// NewHandler returns the route issuing tokens for the named forms.
func NewHandler(store *Store, forms ...string) (*Handler, error) {
	if store == nil || len(forms) == 0 {
		return nil, errors.New("formtoken: NewHandler needs a store and at least one form")
	}
	return &Handler{store: store, forms: forms}, nil
}

// Mount adds the route to g, which must already authenticate.
func (h *Handler) Mount(g *echo.Group) {
	g.POST("/form-tokens", h.issue)
}

type issueRequest struct {
	Form string `json:"form"`
}

type issueResponse struct {
	Token     string `json:"token"`
	ExpiresAt string `json:"expires_at"`
}

// issue is POST /v1/form-tokens {"form":"redeem"} -> 201 {"token","expires_at"}.
func (h *Handler) issue(c echo.Context) error {
	u, err := auth.MustUser(c)
	if err != nil {
		return err
	}
	body, err := readBody(c)
	if err != nil {
		return err
	}
	var req issueRequest
	if err := problem.DecodeJSON(body, &req); err != nil {
		return err
	}
	if req.Form == "" {
		return ErrFormMissing
	}
	if !slices.Contains(h.forms, req.Form) {
		return ErrUnknownForm
	}
	tok, err := h.store.Issue(c.Request().Context(), u.ID, req.Form)
	if err != nil {
		return ErrStoreUnavailable.Wrap(err)
	}
	return c.JSON(http.StatusCreated, issueResponse{Token: tok.ID,
		ExpiresAt: tok.ExpiresAt.Format(time.RFC3339)})
}

// IssueFor issues a token for a page that embeds the form (GET /redeem). It refuses unknown forms.
func (h *Handler) IssueFor(c echo.Context, userID int64, form string) (Token, error) {
	if !slices.Contains(h.forms, form) {
		return Token{}, ErrUnknownForm
	}
	tok, err := h.store.Issue(c.Request().Context(), userID, form)
	if err != nil {
		return Token{}, ErrStoreUnavailable.Wrap(err)
	}
	return tok, nil
}

// CanIssue answers whether IssueFor would issue a token for form now, without issuing one: the answer a
// HEAD of the page gets (RFC 9110 §9.3.2: HEAD answers as GET would). ErrUnknownForm, or
// ErrStoreUnavailable when Redis does not answer a PING.
func (h *Handler) CanIssue(c echo.Context, form string) error {
	if !slices.Contains(h.forms, form) {
		return ErrUnknownForm
	}
	if err := h.store.rdb.Ping(c.Request().Context()).Err(); err != nil {
		return ErrStoreUnavailable.Wrap(err)
	}
	return nil
}

// readBody reads the request body. A body over the limit surfaces as Echo's 413 error, which the
// problem handler maps (the wrap keeps it in the chain).
func readBody(c echo.Context) ([]byte, error) {
	b, err := httpproblem.ReadBody(c.Request().Body)
	if err != nil {
		return nil, fmt.Errorf("read request body: %w", err)
	}
	return b, nil
}
