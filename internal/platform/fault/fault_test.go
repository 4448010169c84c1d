package fault

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNilHookDoesNothing(t *testing.T) {
	var h Hook
	h.At(context.Background(), "crash-after-claim") // must not panic
}

func TestOnRunsOnlyItsPoints(t *testing.T) {
	var got []Point
	h := On(map[Point]func(context.Context){
		"crash-after-claim": func(context.Context) { got = append(got, "crash-after-claim") },
	})
	h.At(context.Background(), "crash-after-rpc")
	h.At(context.Background(), "crash-after-claim")
	assert.Equal(t, []Point{"crash-after-claim"}, got)
}

func TestKillRefusesUnknownPointsAndArmsNothingForEmpty(t *testing.T) {
	known := []Point{"crash-after-claim", "crash-after-commit"}
	h, err := Kill("POINTS_FAULT", "", known, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	assert.Nil(t, h)
	_, err = Kill("POINTS_FAULT", "crash-somewhere", known, slog.New(slog.DiscardHandler))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `POINTS_FAULT "crash-somewhere"`)
	h, err = Kill("POINTS_FAULT", "crash-after-commit", known, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NotNil(t, h)
	h.At(context.Background(), "crash-after-claim") // another point: the process lives on
}
