// Package auth authenticates the demo users by bearer token, or, for the web pages, by the same token
// held in a session cookie. Tokens are looked up by their SHA-256 digest, so the database never holds
// them in clear.
package auth

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	"gorm.io/gorm"

	"idemshop/internal/platform/problem"
)

// User is an authenticated caller.
type User struct {
	ID   int64
	Name string
}

// Authenticator resolves bearer tokens to users.
type Authenticator struct {
	db *gorm.DB
}

// New returns an Authenticator over db.
func New(db *gorm.DB) (*Authenticator, error) {
	if db == nil {
		return nil, errors.New("auth: New needs a db")
	}
	return &Authenticator{db: db}, nil
}

// TokenHash is the stored form of a token: its SHA-256 in lowercase hex.
func TokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Lookup returns the user owning token, or problem.ErrUnauthorized.
func (a *Authenticator) Lookup(ctx context.Context, token string) (User, error) {
	if token == "" {
		return User{}, problem.ErrUnauthorized
	}
	var u User
	// Row().Scan, not Raw().Scan: GORM's Scan renders the SQL text of every statement for its logger,
	// and this one runs on every authenticated request.
	err := a.db.WithContext(ctx).Raw(`SELECT id, name FROM users WHERE token_hash = ?`, TokenHash(token)).
		Row().Scan(&u.ID, &u.Name)
	if errors.Is(err, sql.ErrNoRows) {
		return User{}, problem.ErrUnauthorized
	}
	if err != nil {
		return User{}, fmt.Errorf("look up token: %w", err)
	}
	return u, nil
}

type ctxKey struct{}

// Middleware requires `Authorization: Bearer <token>` and puts the User in the request context.
// It runs before any idempotency handling, so a 401 stores nothing.
//
// A request without an Authorization header may instead carry the session cookie the demo login sets
// (a browser posting the redeem form). A request that sends a header is judged by the header alone, so
// the bearer path is exactly what it was. The cookie is SameSite=Lax, so a cross-site POST does not
// carry it, and the redeem form additionally needs its one-time token, which another site cannot read.
func (a *Authenticator) Middleware() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			token, err := a.credential(c.Request())
			if err != nil {
				return err
			}
			u, err := a.Lookup(c.Request().Context(), token)
			if err != nil {
				return err
			}
			setUser(c, u)
			return next(c)
		}
	}
}

// credential returns the bearer token, or the session cookie's token when no Authorization header
// was sent. A header that is sent is the credential, even empty (401, never the cookie instead). Two
// Authorization lines, or two session cookies, are refused (401): which one authenticated would depend
// on the reader (Header.Get and Cookie take the first), as with a key or form token sent twice.
func (a *Authenticator) credential(r *http.Request) (string, error) {
	if hs, sent := r.Header[echo.HeaderAuthorization]; sent {
		if len(hs) > 1 {
			return "", problem.ErrUnauthorized.WithDetail(fmt.Sprintf("%s sent %d times: send one credential", echo.HeaderAuthorization, len(hs)))
		}
		scheme, token, ok := strings.Cut(hs[0], " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return "", problem.ErrUnauthorized
		}
		return strings.TrimSpace(token), nil
	}
	return sessionToken(r)
}

// sessionToken returns the token of the request's session cookie: problem.ErrUnauthorized when there
// is none, it is empty, or there are two that differ (a second one under another path or domain, or
// sent by hand: which one counted would depend on the reader). Copies of one token are that token: a
// browser left with a copy under another path (which logout, clearing Path=/, cannot remove) would
// otherwise be sent back to /login for ever.
func sessionToken(r *http.Request) (string, error) {
	cks := r.CookiesNamed(CookieName)
	for _, ck := range cks[min(1, len(cks)):] {
		if ck.Value != cks[0].Value {
			return "", problem.ErrUnauthorized.WithDetail(fmt.Sprintf("cookie %s sent %d times with different values: send one", CookieName, len(cks)))
		}
	}
	if len(cks) == 0 || cks[0].Value == "" {
		return "", problem.ErrUnauthorized
	}
	return cks[0].Value, nil
}

func setUser(c echo.Context, u User) {
	req := c.Request()
	c.SetRequest(req.WithContext(context.WithValue(req.Context(), ctxKey{}, u)))
}

// CookieName is the session cookie of the web pages. It holds the demo user's token: this is a demo
// login, not a session system (see docs/redeem.md).
const CookieName = "idemshop_session"

// SessionCookie returns the cookie that logs the browser in with token. HttpOnly keeps it from page
// scripts; SameSite=Lax keeps it off cross-site POSTs; Secure follows the connection, so the demo
// also works over plain http on localhost.
func SessionCookie(token string, secure bool) *http.Cookie {
	return &http.Cookie{Name: CookieName, Value: token, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: secure}
}

// ClearedSessionCookie returns the cookie that logs the browser out (expired now).
func ClearedSessionCookie(secure bool) *http.Cookie {
	return &http.Cookie{Name: CookieName, Value: "", Path: "/", HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: secure, MaxAge: -1}
}

// PageMiddleware authenticates the web pages by the session cookie. A browser without a valid one is
// sent to loginPath (303) instead of getting a 401 problem, which a person could do nothing with.
func (a *Authenticator) PageMiddleware(loginPath string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			token, err := sessionToken(c.Request())
			if err != nil {
				return c.Redirect(http.StatusSeeOther, loginPath)
			}
			u, err := a.Lookup(c.Request().Context(), token)
			if errors.Is(err, problem.ErrUnauthorized) {
				c.SetCookie(ClearedSessionCookie(c.IsTLS()))
				return c.Redirect(http.StatusSeeOther, loginPath)
			}
			if err != nil {
				return err
			}
			setUser(c, u)
			return next(c)
		}
	}
}

// UserFrom returns the user the middleware authenticated. Handlers behind the middleware can rely on ok.
func UserFrom(ctx context.Context) (User, bool) {
	u, ok := ctx.Value(ctxKey{}).(User)
	return u, ok
}

// MustUser returns the authenticated user or problem.ErrUnauthorized when the route was mounted without
// the middleware (a wiring bug, refused rather than served anonymously).
func MustUser(c echo.Context) (User, error) {
	u, ok := UserFrom(c.Request().Context())
	if !ok {
		return User{}, problem.ErrUnauthorized
	}
	return u, nil
}
