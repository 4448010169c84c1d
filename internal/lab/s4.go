package lab

import (
	"context"
	"errors"
)

// runS4 is not built yet.
func runS4(ctx context.Context, env *Env) (Unsafe, Guarded, error) {
	return Unsafe{}, Guarded{}, errors.New("S4: not built yet")
}
