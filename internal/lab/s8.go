package lab

import (
	"context"
	"errors"
)

// runS8 is not built yet.
func runS8(ctx context.Context, env *Env) (Unsafe, Guarded, error) {
	return Unsafe{}, Guarded{}, errors.New("S8: not built yet")
}
