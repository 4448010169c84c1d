package ordersapp

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"idemshop/internal/formtoken"
	"idemshop/internal/rewards"
)

// mountLabFormToken mounts the unsafe twin of the one-time form token (S4): POST
// /lab/unsafe/v1/rewards/redeem, the redeem route over a service whose token use is
// rewards.ConsumeFirst (the token is deleted before the redeem transaction). Its store has the guarded
// store's Redis and key prefix, so it takes the tokens POST /v1/form-tokens issues.
func mountLabFormToken(p labParts) error {
	cfg := p.d.Config
	store, err := formtoken.New(p.d.Redis, formtoken.Options{
		KeyPrefix: cfg.Redis.KeyPrefix, TTL: cfg.FormTokenTTL, Lease: cfg.FormTokenInFlightLease,
	})
	if err != nil {
		return fmt.Errorf("lab S4: %w", err)
	}
	repo, err := rewards.NewRepository(p.d.DB)
	if err != nil {
		return fmt.Errorf("lab S4: %w", err)
	}
	// A registry of its own: lab submits must not count as the guarded route's.
	svc, err := rewards.NewService(store, repo, rewards.NewMetrics(prometheus.NewRegistry()), rewards.ConsumeFirst,
		max(cfg.FormTokenInFlightLease, 5*time.Second))
	if err != nil {
		return fmt.Errorf("lab S4: %w", err)
	}
	h, err := rewards.NewHandler(svc, p.redeemView, min(cfg.FormTokenInFlightLease, 5*time.Second))
	if err != nil {
		return fmt.Errorf("lab S4: %w", err)
	}
	h.Mount(p.v1)
	return nil
}
