package lab

import (
	"context"
	"errors"
)

// runS6 is not built yet.
func runS6(ctx context.Context, env *Env) (Unsafe, Guarded, error) {
	return Unsafe{}, Guarded{}, errors.New("S6: not built yet")
}
