package lab

import (
	"context"
	"errors"
)

// runS5 is not built yet.
func runS5(ctx context.Context, env *Env) (Unsafe, Guarded, error) {
	return Unsafe{}, Guarded{}, errors.New("S5: not built yet")
}
