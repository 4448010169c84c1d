package problem_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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

// A body cut short is named as such; the detail was Go's "unexpected EOF" (a newcomer's, 2026-12-06).
func TestDecodeJSONNamesABodyCutShort(t *testing.T) {
	t.Parallel()
	for _, in := range []string{`{`, `{"a":`, `{"a":1`, `{"a":1,`} {
		var v struct {
			A int `json:"a"`
		}
		err := problem.DecodeJSONOpen([]byte(in), &v)
		var p *problem.Error
		require.ErrorAs(t, err, &p, in)
		assert.Equal(t, "malformed_body", p.Code, in)
		assert.Equal(t, "request body ends before its JSON value does", p.Detail, in)
	}
}

// The detail is sent back to the client: an unknown name in it is clipped, at the top level and
// deeper. A name of 500 kB came back whole (a helper's finding, 2026-12-06).
func TestDecodeJSONClipsTheNamesItSendsBack(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("Z", 500_000)
	var v struct {
		A struct {
			B int `json:"b"`
		} `json:"a"`
	}
	for _, in := range []string{`{"` + long + `":1}`, `{"a":{"` + long + `":1}}`} {
		err := problem.DecodeJSON([]byte(in), &v)
		var p *problem.Error
		require.ErrorAs(t, err, &p)
		assert.Equal(t, "malformed_body", p.Code)
		assert.Less(t, len(p.Detail), 300, "%.200s", p.Detail)
		assert.Contains(t, p.Detail, "unknown field")
	}
}

// The open variant skips members it has no field for (a later version of the sender), but not a field
// in another case or a field twice.
func TestDecodeJSONOpen(t *testing.T) {
	t.Parallel()
	type body struct {
		Status string `json:"status"`
	}
	for in, want := range map[string]string{
		`{"status":"A"}`: "A", `{"status":"A","fee":1}`: "A", `{"fee":1,"fee":2,"x":{"Status":"B"},"status":"A"}`: "A",
		`{"Status":"A"}`: "", `{"STATUS":"A"}`: "", `{"ſtatus":"A"}`: "", `{"status":"A","status":"B"}`: "",
		`{"status":"A","Status":"B"}`: "", `null`: "", `[]`: "", `{"status":"A"} {}`: "", `{"status":1}`: "",
	} {
		var v body
		err := problem.DecodeJSONOpen([]byte(in), &v)
		if want == "" {
			assert.ErrorIs(t, err, problem.ErrMalformedBody, in)
			continue
		}
		if assert.NoError(t, err, in) {
			assert.Equal(t, want, v.Status, in)
		}
	}
}

// What a refused body claims, for its audit row: the exact names, the first of each, whatever else is
// wrong with the body.
func TestDecodeClaimedReadsTheExactNamesOnly(t *testing.T) {
	t.Parallel()
	type body struct {
		At     time.Time `json:"at"`
		ID     string    `json:"id"`
		Amount int64     `json:"amount"`
	}
	for in, want := range map[string]body{
		`{"id":"a","amount":1}`:                  {ID: "a", Amount: 1},
		`{"at":"yesterday","id":"a","amount":1}`: {ID: "a", Amount: 1},
		`{"id":"a","Id":"b","ID":"c"}`:           {ID: "a"},
		`{"Id":"b","id":"a"}`:                    {ID: "a"},
		`{"id":"a","id":"b"}`:                    {ID: "a"},
		`{"id":"a","amount":"x"}`:                {ID: "a"},
		`{"amount":2,"x":{"id":"n"},"id":"a"} x`: {ID: "a", Amount: 2},
		`{"id":"a","amount":`:                    {ID: "a"},
		`{"Id":"b"}`:                             {},
		`[{"id":"a"}]`:                           {},
		`null`:                                   {},
	} {
		var got body
		problem.DecodeClaimed([]byte(in), &got)
		assert.Equal(t, want, got, in)
	}
}

// encoding/json reports a time that does not parse with Go's layout and without the member's name.
func TestDecodeJSONNamesTheBadTimeField(t *testing.T) {
	t.Parallel()
	type body struct {
		ID   string     `json:"id"`
		At   time.Time  `json:"occurred_at"`
		Seen *time.Time `json:"seen_at"`
	}
	for in, field := range map[string]string{
		`{"id":"a","occurred_at":"yesterday"}`:                              "occurred_at",
		`{"id":"a","occurred_at":"2026-12-05 10:00:00"}`:                    "occurred_at",
		`{"id":"a","occurred_at":5}`:                                        "occurred_at",
		`{"id":"a","occurred_at":"2026-12-05T10:00:00Z","seen_at":"later"}`: "seen_at",
	} {
		var v body
		err := problem.DecodeJSON([]byte(in), &v)
		assert.ErrorIs(t, err, problem.ErrMalformedBody, in)
		var pe *problem.Error
		if assert.ErrorAs(t, err, &pe, in) {
			assert.Equal(t, `field "`+field+`" must be an RFC 3339 time in a string, e.g. "2026-12-05T10:00:00Z"`, pe.Detail, in)
			assert.NotContains(t, pe.Detail, "2006", in)
		}
	}
	var v body
	assert.NoError(t, problem.DecodeJSON([]byte(`{"id":"a","occurred_at":"2026-12-05T10:00:00+01:00","seen_at":null}`), &v))
}

// encoding/json decodes null into a string, a number or a time as nothing at all: {"occurred_at":null}
// would pass as a body without the member. A member whose field cannot hold null is refused, in both
// variants; a pointer field takes null, and a null inside a member's value is the value's business.
func TestDecodeJSONRefusesNullForAFieldThatCannotHoldIt(t *testing.T) {
	t.Parallel()
	type body struct {
		ID    string         `json:"id"`
		N     int64          `json:"n"`
		At    time.Time      `json:"occurred_at"`
		Seen  *time.Time     `json:"seen_at"`
		Extra map[string]any `json:"extra"`
	}
	decoders := map[string]func([]byte, any) error{"DecodeJSON": problem.DecodeJSON, "DecodeJSONOpen": problem.DecodeJSONOpen}
	for name, decode := range decoders {
		for in, field := range map[string]string{
			`{"id":null}`: "id", `{"id":"a","n":null}`: "n", `{"id":"a","occurred_at": null }`: "occurred_at",
		} {
			var v body
			err := decode([]byte(in), &v)
			assert.ErrorIs(t, err, problem.ErrMalformedBody, name+" "+in)
			var pe *problem.Error
			if assert.ErrorAs(t, err, &pe, name+" "+in) {
				assert.Equal(t, `field "`+field+`" must not be null`, pe.Detail, name+" "+in)
			}
		}
		var v body
		if assert.NoError(t, decode([]byte(`{"id":"a","seen_at":null,"extra":{"k":null}}`), &v), name) {
			assert.Equal(t, "a", v.ID, name)
			assert.Nil(t, v.Seen, name)
			assert.Equal(t, map[string]any{"k": nil}, v.Extra, name)
		}
	}
	var v body
	assert.NoError(t, problem.DecodeJSONOpen([]byte(`{"id":"a","fee":null}`), &v), "a member the open variant skips may be null")
}
