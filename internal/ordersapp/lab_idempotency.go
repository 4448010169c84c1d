package ordersapp

// mountLabIdempotency mounts the unsafe twins of the Idempotency-Key guard (S2, S3, S10).
func mountLabIdempotency(p labParts) error { return nil }
