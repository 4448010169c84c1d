package ordersapp

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"idemshop/internal/formtoken"
	"idemshop/internal/rewards"
)

// mountLabFormToken mounts the unsafe twin of the one-time form token (S4): POST
// /lab/unsafe/v1/rewards/redeem deletes the token before the redeem transaction. Its store has the
// guarded store's Redis and key prefix, so it takes the tokens POST /v1/form-tokens issues.
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
	// A registry of its own: the guarded route already registered idemshop_rewards_redeem_total on
	// d.Registry, and lab submits must not count as the guarded route's anyway.
	svc, err := rewards.NewService(store, repo, rewards.NewMetrics(prometheus.NewRegistry()),
		max(cfg.FormTokenInFlightLease, 5*time.Second))
	if err != nil {
		return fmt.Errorf("lab S4: %w", err)
	}
	if err := rewards.MountUnsafe(p.v1, svc); err != nil {
		return fmt.Errorf("lab S4: %w", err)
	}
	return nil
}
