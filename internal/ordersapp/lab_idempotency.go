package ordersapp

import (
	"fmt"

	"idemshop/internal/idempotency"
	"idemshop/internal/orders"
)

// mountLabIdempotency mounts the unsafe twins of the Idempotency-Key guard (S2, S3, S10): the same
// order handler and repository as POST /v1/orders, each with one broken runner in place of the Guard,
// at POST /lab/unsafe/v1/<scenario>/orders (its GET routes come along; they are the guarded ones).
func mountLabIdempotency(p labParts) error {
	s2, err := idempotency.NewCheckThenInsert(p.d.DB, p.idemMetrics)
	if err != nil {
		return fmt.Errorf("lab S2: %w", err)
	}
	s3, err := idempotency.NewCommitKeyFirst(p.d.DB, p.idemMetrics)
	if err != nil {
		return fmt.Errorf("lab S3: %w", err)
	}
	s10, err := idempotency.NewIgnoreFingerprint(p.d.DB, p.idemMetrics)
	if err != nil {
		return fmt.Errorf("lab S10: %w", err)
	}
	for _, m := range []struct {
		prefix string
		runner idempotency.Runner
	}{{"/s2", s2}, {"/s3", s3}, {"/s10", s10}} {
		h, err := orders.NewHandler(p.repo, m.runner, p.settler)
		if err != nil {
			return fmt.Errorf("lab %s: %w", m.prefix, err)
		}
		h.Mount(p.v1.Group(m.prefix))
	}
	return nil
}
