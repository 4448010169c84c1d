package lab

import (
	"context"
	"errors"
)

// runS9 is not built yet.
func runS9(ctx context.Context, env *Env) (Unsafe, Guarded, error) {
	return Unsafe{}, Guarded{}, errors.New("S9: not built yet")
}
