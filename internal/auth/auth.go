// Package auth authenticates the demo users by bearer token. Tokens are looked up by their SHA-256
// digest, so the database never holds them in clear.
package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
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
	res := a.db.WithContext(ctx).Raw(`SELECT id, name FROM users WHERE token_hash = ?`, TokenHash(token)).Scan(&u)
	if res.Error != nil {
		return User{}, fmt.Errorf("look up token: %w", res.Error)
	}
	if res.RowsAffected == 0 {
		return User{}, problem.ErrUnauthorized
	}
	return u, nil
}

type ctxKey struct{}

// Middleware requires `Authorization: Bearer <token>` and puts the User in the request context.
// It runs before any idempotency handling, so a 401 stores nothing.
func (a *Authenticator) Middleware() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			scheme, token, ok := strings.Cut(c.Request().Header.Get(echo.HeaderAuthorization), " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") {
				return problem.ErrUnauthorized
			}
			u, err := a.Lookup(c.Request().Context(), strings.TrimSpace(token))
			if err != nil {
				return err
			}
			req := c.Request()
			c.SetRequest(req.WithContext(context.WithValue(req.Context(), ctxKey{}, u)))
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
