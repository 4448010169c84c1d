package lab

import (
	"context"
	"errors"
)

// runS7 is not built yet.
func runS7(ctx context.Context, env *Env) (Unsafe, Guarded, error) {
	return Unsafe{}, Guarded{}, errors.New("S7: not built yet")
}
