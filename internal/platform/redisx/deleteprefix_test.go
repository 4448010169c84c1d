package redisx_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/redisx"
	"idemshop/internal/testenv"
)

// DeletePrefix removes every key of one namespace, across several SCAN pages, and no other key.
func TestDeletePrefix(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	for i := range 2500 {
		require.NoError(t, env.Redis.Set(ctx, fmt.Sprintf("%srun:k%d", env.Prefix, i), 1, 0).Err())
	}
	require.NoError(t, env.Redis.Set(ctx, env.Prefix+"other", 1, 0).Err())
	require.NoError(t, redisx.DeletePrefix(ctx, env.Redis, env.Prefix+"run:"))
	left, err := env.Redis.Keys(ctx, env.Prefix+"*").Result()
	require.NoError(t, err)
	assert.Equal(t, []string{env.Prefix + "other"}, left)
}

// The prefix is text, not a glob: a namespace named with *, ?, [ or \ deletes its own keys and none of
// its neighbours' ("run:?:" must not take "run:A:k", "*" must not take everything).
func TestDeletePrefixMatchesThePrefixAsText(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	for _, k := range []string{"run:?:k", "run:A:k", "run:[ab]:k", "run:a:k", "run:*:k", "run:\\:k", "other"} {
		require.NoError(t, env.Redis.Set(ctx, env.Prefix+k, 1, 0).Err())
	}
	for _, p := range []string{"run:?:", "run:[ab]:", "run:*:", "run:\\:"} {
		require.NoError(t, redisx.DeletePrefix(ctx, env.Redis, env.Prefix+p))
	}
	left, err := env.Redis.Keys(ctx, env.Prefix+"*").Result()
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{env.Prefix + "run:A:k", env.Prefix + "run:a:k", env.Prefix + "other"}, left)
}
