package lab

import (
	"context"
	"errors"
)

// runS11 is not built yet.
func runS11(ctx context.Context, env *Env) (Unsafe, Guarded, error) {
	return Unsafe{}, Guarded{}, errors.New("S11: not built yet")
}
