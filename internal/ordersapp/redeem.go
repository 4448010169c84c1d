package ordersapp

import (
	"fmt"
	"time"

	"github.com/labstack/echo/v4"

	"idemshop/internal/auth"
	"idemshop/internal/formtoken"
	"idemshop/internal/orders"
	"idemshop/internal/points"
	"idemshop/internal/rewards"
	"idemshop/internal/web"
)

// mountRedeem wires the redeem feature: POST /v1/form-tokens and POST /v1/rewards/redeem on v1 (which
// authenticates by bearer token or the session cookie), and the web pages (/login, /logout, /, /redeem)
// on e. All of it lives here so that New needs one call. It returns the pages, which the lab's S4 twin
// answers form posts with too.
func mountRedeem(e *echo.Echo, v1 *echo.Group, d Deps) (rewards.View, error) {
	cfg := d.Config
	lease := cfg.FormTokenInFlightLease
	store, err := formtoken.New(d.Redis, formtoken.Options{
		KeyPrefix: cfg.Redis.KeyPrefix, TTL: cfg.FormTokenTTL, Lease: lease,
	})
	if err != nil {
		return nil, fmt.Errorf("redeem: %w", err)
	}
	tokens, err := formtoken.NewHandler(store, rewards.FormName)
	if err != nil {
		return nil, fmt.Errorf("redeem: %w", err)
	}
	repo, err := rewards.NewRepository(d.DB)
	if err != nil {
		return nil, fmt.Errorf("redeem: %w", err)
	}
	// The work after the token was taken gets at least 5 s: a very short lease (tests) must not make a
	// live transaction give up. When the lease is the shorter one, the database's unique index on the
	// token is what keeps a second submit from paying twice.
	svc, err := rewards.NewService(store, repo, rewards.NewMetrics(d.Registry), rewards.BeginThenComplete, max(lease, 5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("redeem: %w", err)
	}
	authn, err := auth.New(d.DB)
	if err != nil {
		return nil, fmt.Errorf("redeem: %w", err)
	}
	orderRepo, err := orders.NewRepository(d.DB)
	if err != nil {
		return nil, fmt.Errorf("redeem: %w", err)
	}
	ledger, err := points.NewLedger(d.DB)
	if err != nil {
		return nil, fmt.Errorf("redeem: %w", err)
	}
	pages, err := web.New(web.Deps{DB: d.DB, Auth: authn, Tokens: tokens, Rewards: svc,
		Orders: orderRepo, Ledger: ledger})
	if err != nil {
		return nil, fmt.Errorf("redeem: %w", err)
	}
	// A browser form post waits for an in-flight first submit (a double-click) up to the lease, at most
	// 5 s, so it can show that submit's result instead of a 409.
	redeem, err := rewards.NewHandler(svc, pages, min(lease, 5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("redeem: %w", err)
	}
	tokens.Mount(v1)
	redeem.Mount(v1)
	pages.Mount(e)
	return pages, nil
}
