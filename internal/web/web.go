// Package web serves the orders service's HTML pages: a demo login, the storefront and the redeem form.
// They are server-rendered with html/template (which escapes every value for its context) and need no
// JavaScript: the redeem form is a plain form post carrying its one-time token in a hidden field.
package web

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"gorm.io/gorm"

	"idemshop/internal/auth"
	"idemshop/internal/formtoken"
	"idemshop/internal/orders"
	"idemshop/internal/platform/httpproblem"
	"idemshop/internal/platform/problem"
	"idemshop/internal/points"
	"idemshop/internal/rewards"
)

//go:embed templates/*.html
var templateFS embed.FS

// LoginPath is where a browser without a session is sent.
const LoginPath = "/login"

// Listing limits of the storefront.
const (
	ordersShown  = 20
	ledgerShown  = 20
	couponsShown = 20
)

// Deps are what the pages read and call.
type Deps struct {
	DB      *gorm.DB
	Auth    *auth.Authenticator
	Tokens  *formtoken.Handler
	Rewards *rewards.Service
	Orders  *orders.Repository
	Ledger  *points.Ledger
}

// Pages holds the parsed templates and the dependencies. It also renders the HTML answers of the redeem
// form post (rewards.View).
type Pages struct {
	d     Deps
	pages map[string]*template.Template
}

// New parses the embedded templates.
func New(d Deps) (*Pages, error) {
	if d.DB == nil || d.Auth == nil || d.Tokens == nil || d.Rewards == nil || d.Orders == nil || d.Ledger == nil {
		return nil, errors.New("web: New needs DB, Auth, Tokens, Rewards, Orders and Ledger")
	}
	funcs := template.FuncMap{"money": money}
	p := &Pages{d: d, pages: map[string]*template.Template{}}
	for _, name := range []string{"login", "store", "redeem", "result", "error"} {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("web: parse template %s: %w", name, err)
		}
		p.pages[name] = t
	}
	return p, nil
}

// money formats minor units as "12.50", with integer maths only.
func money(cents int64) string {
	sign := ""
	if cents < 0 {
		if cents == math.MinInt64 {
			return "-" + strconv.FormatInt(cents, 10) // unreachable for real prices; avoids overflow
		}
		sign, cents = "-", -cents
	}
	return fmt.Sprintf("%s%d.%02d", sign, cents/100, cents%100)
}

// Mount adds the pages to e. The login pages are public; the others need the session cookie.
func (p *Pages) Mount(e *echo.Echo) {
	e.GET(LoginPath, p.loginPage)
	e.POST(LoginPath, p.login)
	e.POST("/logout", p.logout)
	// Per route, not an e.Group("", ...): a group with middleware also catches every unknown path, which
	// would turn the API's 404 problems into redirects to the login page.
	needLogin := p.d.Auth.PageMiddleware(LoginPath)
	e.GET("/", p.store, needLogin)
	e.GET("/redeem", p.redeemForm, needLogin)
}

// render executes page into a buffer first, so a template error becomes a clean 500, not half a page.
func (p *Pages) render(c echo.Context, status int, page string, data any) error {
	var buf bytes.Buffer
	if err := p.pages[page].ExecuteTemplate(&buf, page+".html", data); err != nil {
		return fmt.Errorf("render %s: %w", page, err)
	}
	h := c.Response().Header()
	// Pages show one user's data and carry one-time tokens: never cache them anywhere.
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	return c.HTMLBlob(status, buf.Bytes())
}

type base struct {
	Title string
	User  *auth.User
}

func userOf(c echo.Context) *auth.User {
	if u, ok := auth.UserFrom(c.Request().Context()); ok {
		return &u
	}
	return nil
}

type loginData struct {
	base
	Users []string
	Error string
}

func (p *Pages) demoUsers(ctx context.Context) ([]string, error) {
	names := []string{}
	if err := p.d.DB.WithContext(ctx).Raw(`SELECT name FROM users ORDER BY id`).Scan(&names).Error; err != nil {
		return nil, fmt.Errorf("list demo users: %w", err)
	}
	return names, nil
}

func (p *Pages) loginPage(c echo.Context) error {
	users, err := p.demoUsers(c.Request().Context())
	if err != nil {
		return err
	}
	return p.render(c, http.StatusOK, "login", loginData{base: base{Title: "Log in"}, Users: users})
}

// login is POST /login with user=<name> in the form body (the query string is not read, as on the
// redeem form). Each demo user's token is "<name>-token" (migrations/00002); the token is checked
// against the stored digest like a bearer token before the cookie is set. A user sent twice is refused
// (400), as the redeem form refuses a field sent twice: which one would log in depends on the reader.
// A body that cannot be read or decoded is a problem response (httpproblem.ReadForm), as on the
// redeem form.
func (p *Pages) login(c echo.Context) error {
	refuse := func(status int, msg string) error {
		users, err := p.demoUsers(c.Request().Context())
		if err != nil {
			return err
		}
		if status == http.StatusUnauthorized {
			c.Response().Header().Set("WWW-Authenticate", httpproblem.Challenge)
		}
		return p.render(c, status, "login", loginData{base: base{Title: "Log in"}, Users: users, Error: msg})
	}
	form, err := httpproblem.ReadForm(c.Request())
	if err != nil {
		return err
	}
	if n := len(form["user"]); n > 1 {
		return refuse(http.StatusBadRequest, fmt.Sprintf("user sent %d times: log in as one user", n))
	}
	name := form.Get("user")
	token := name + "-token"
	if _, err := p.d.Auth.Lookup(c.Request().Context(), token); err != nil || name == "" {
		if err != nil && !errors.Is(err, problem.ErrUnauthorized) {
			return err
		}
		return refuse(http.StatusUnauthorized, "unknown demo user")
	}
	c.SetCookie(auth.SessionCookie(token, c.IsTLS()))
	return c.Redirect(http.StatusSeeOther, "/")
}

func (p *Pages) logout(c echo.Context) error {
	c.SetCookie(auth.ClearedSessionCookie(c.IsTLS()))
	return c.Redirect(http.StatusSeeOther, LoginPath)
}

type storeData struct {
	base
	Products []orders.Product
	Orders   []orders.Line
	Balance  int64
	Ledger   []points.Entry
	Coupons  []rewards.Coupon
}

func (p *Pages) store(c echo.Context) error {
	ctx := c.Request().Context()
	u := userOf(c)
	if u == nil {
		return c.Redirect(http.StatusSeeOther, LoginPath)
	}
	products, err := p.d.Orders.Products(ctx)
	if err != nil {
		return err
	}
	myOrders, err := p.d.Orders.Newest(ctx, u.ID, ordersShown)
	if err != nil {
		return err
	}
	balance, ledger, err := p.d.Ledger.Balance(ctx, u.ID, ledgerShown)
	if err != nil {
		return err
	}
	coupons, err := p.d.Rewards.Coupons(ctx, u.ID, couponsShown)
	if err != nil {
		return err
	}
	return p.render(c, http.StatusOK, "store", storeData{base: base{Title: "Store", User: u},
		Products: products, Orders: myOrders, Balance: balance, Ledger: ledger, Coupons: coupons})
}

type redeemData struct {
	base
	Balance  int64
	Rewards  []rewards.Reward
	Token    string
	Selected string
	Error    string
}

// redeemForm is GET /redeem: the form with a fresh one-time token in its hidden form_token field. Every
// load issues a new token, so a new visit is a new submission; a reload of the result page is not. A
// HEAD (a link checker, a monitor) gets the page's status and headers and no token: a token is kept in
// Redis for FORM_TOKEN_TTL, and no one can submit a form whose body was never sent. It still asks
// whether a token could be issued, so that it answers 503 whenever GET would.
func (p *Pages) redeemForm(c echo.Context) error {
	u := userOf(c)
	if u == nil {
		return c.Redirect(http.StatusSeeOther, LoginPath)
	}
	if c.Request().Method == http.MethodHead {
		if err := p.d.Tokens.CanIssue(c, rewards.FormName); err != nil {
			return p.failed(c, httpproblem.Resolve(err))
		}
		// A stand-in of a token's length in the hidden field, so that the page HEAD does not send has
		// the length of the one GET sends: Content-Length as GET would answer (RFC 9110 §9.3.2).
		return p.renderForm(c, http.StatusOK, *u, strings.Repeat("-", formtoken.IDLen), "", "")
	}
	tok, err := p.d.Tokens.IssueFor(c, u.ID, rewards.FormName)
	if err != nil {
		return p.failed(c, httpproblem.Resolve(err))
	}
	return p.renderForm(c, http.StatusOK, *u, tok.ID, "", "")
}

func (p *Pages) renderForm(c echo.Context, status int, u auth.User, tokenID, selected, msg string) error {
	ctx := c.Request().Context()
	catalogue, err := p.d.Rewards.Catalogue(ctx)
	if err != nil {
		return err
	}
	balance, _, err := p.d.Ledger.Balance(ctx, u.ID, 0)
	if err != nil {
		return err
	}
	if selected == "" && len(catalogue) > 0 {
		selected = catalogue[0].ID
	}
	return p.render(c, status, "redeem", redeemData{base: base{Title: "Redeem points", User: &u},
		Balance: balance, Rewards: catalogue, Token: tokenID, Selected: selected, Error: msg})
}

type resultData struct {
	base
	Result   rewards.Result
	Replayed bool
}

// RedeemDone renders the result of a form post (rewards.View). A replay says so; its status and the
// Idempotent-Replayed header match the JSON API's.
func (p *Pages) RedeemDone(c echo.Context, a rewards.Answer) error {
	if a.Replayed {
		c.Response().Header().Set("Idempotent-Replayed", "true")
	}
	return p.render(c, http.StatusCreated, "result", resultData{base: base{Title: "Points redeemed", User: userOf(c)},
		Result: a.Result, Replayed: a.Replayed})
}

type errorData struct {
	base
	Heading string
	Error   string
	Retry   bool
}

// RedeemFailed renders a refused form post (rewards.View). Too few points, or a submit still in
// flight, shows the form again with the same token: it is still usable, and submitting it again either
// redeems or replays the first submit's result.
func (p *Pages) RedeemFailed(c echo.Context, pe *problem.Error, tokenID, rewardID string) error {
	u := userOf(c)
	if u != nil && formtoken.ValidID(tokenID) &&
		(errors.Is(pe, rewards.ErrInsufficientPoints) || errors.Is(pe, formtoken.ErrTokenInUse)) {
		setRetryAfter(c, pe.RetryAfter)
		return p.renderForm(c, httpproblem.StatusOf(pe.Kind), *u, tokenID, rewardID, pe.Detail)
	}
	return p.failed(c, pe)
}

// failed renders pe as an HTML error page with the status (and Retry-After) the JSON API would use.
func (p *Pages) failed(c echo.Context, pe *problem.Error) error {
	setRetryAfter(c, pe.RetryAfter)
	return p.render(c, httpproblem.StatusOf(pe.Kind), "error", errorData{base: base{Title: "Error", User: userOf(c)},
		Heading: http.StatusText(httpproblem.StatusOf(pe.Kind)), Error: pe.Detail, Retry: pe.RetryAfter > 0})
}

func setRetryAfter(c echo.Context, d time.Duration) {
	if d > 0 {
		c.Response().Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(d.Seconds()))))
	}
}
