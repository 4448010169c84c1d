package lab

import (
	"context"
	"errors"
)

// runS3 is not built yet.
func runS3(ctx context.Context, env *Env) (Unsafe, Guarded, error) {
	return Unsafe{}, Guarded{}, errors.New("S3: not built yet")
}
