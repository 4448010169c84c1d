package problem_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"idemshop/internal/platform/problem"
)

func TestIsComparesCodesAcrossCopies(t *testing.T) {
	t.Parallel()
	base := problem.New(problem.KindConflict, "busy", "try later")
	copied := base.WithRetryAfter(time.Second).Wrap(errors.New("cause"))
	assert.ErrorIs(t, fmt.Errorf("x: %w", copied), base)
	assert.NotErrorIs(t, copied, problem.ErrNotFound)
}

func TestDecodeJSON(t *testing.T) {
	t.Parallel()
	type body struct {
		A int `json:"a"`
	}
	for in, wantErr := range map[string]bool{
		`{"a":1}`: false, `{"a":1,"b":2}`: true, `{"a":"x"}`: true, `{"a":1} {}`: true, ``: true, `{`: true,
		`{"A":1}`: true, `{"a":1,"a":2}`: true, `[]`: true, `{ "a" : 1 }`: false,
		`null`: true, ` null `: true, `"x"`: true, `1`: true,
	} {
		var v body
		err := problem.DecodeJSON([]byte(in), &v)
		if !wantErr {
			assert.NoError(t, err, in)
			continue
		}
		assert.ErrorIs(t, err, problem.ErrMalformedBody, in)
	}
}
