package lab

import (
	"context"
	"errors"
)

// runS10 is not built yet.
func runS10(ctx context.Context, env *Env) (Unsafe, Guarded, error) {
	return Unsafe{}, Guarded{}, errors.New("S10: not built yet")
}
