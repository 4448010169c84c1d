package lab

import (
	"context"
	"errors"
)

// runS2 is not built yet.
func runS2(ctx context.Context, env *Env) (Unsafe, Guarded, error) {
	return Unsafe{}, Guarded{}, errors.New("S2: not built yet")
}
