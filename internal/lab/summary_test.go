package lab_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/lab"
)

// A scenario without an unsafe twin passes on its guarded side alone, and only then; it never claims a
// reproduction.
func TestPassedWithoutAnUnsafeTwin(t *testing.T) {
	twin := lab.Unsafe{NoTwin: true, Side: lab.Side{Detail: "no unsafe twin"}}
	held := lab.Guarded{OK: true}
	assert.True(t, lab.Result{ID: "S9", Unsafe: twin, Guarded: held}.Passed())
	assert.False(t, lab.Result{ID: "S9", Unsafe: twin}.Passed(), "the guard must still hold")
	assert.False(t, lab.Result{ID: "S9", Unsafe: twin, Guarded: held, Error: "boom"}.Passed())
	assert.False(t, lab.Result{ID: "S1", Guarded: held}.Passed(), "with a twin, the failure must show")

	s := lab.Summarize(lab.Result{ID: "S9", Unsafe: twin, Guarded: held})
	assert.Equal(t, lab.NoTwinFigure, s.Unsafe)
	assert.Equal(t, lab.VerdictPass, s.Verdict)
}

// Every scenario of the table has its short line: a short title and figures of its own, not the long
// details the fallback would cut.
func TestEveryScenarioHasASummary(t *testing.T) {
	for _, sc := range lab.Scenarios() {
		r := lab.Result{ID: sc.ID, Title: sc.Title,
			Unsafe:  lab.Unsafe{Reproduced: true, Side: lab.Side{Measured: map[string]int64{}, Detail: "unsafe detail"}},
			Guarded: lab.Guarded{OK: true, Side: lab.Side{Measured: map[string]int64{}, Detail: "guarded detail"}}}
		s := lab.Summarize(r)
		assert.NotEqual(t, sc.Title, s.Short, "%s has a short title", sc.ID)
		assert.LessOrEqual(t, utf8.RuneCountInString(s.Short), 18, sc.ID)
		assert.NotEqual(t, "unsafe detail", s.Unsafe, "%s has unsafe figures", sc.ID)
		assert.NotEqual(t, "guarded detail", s.Guarded, "%s has guarded figures", sc.ID)
		assert.Equal(t, lab.VerdictPass, s.Verdict, sc.ID)
	}
	s := lab.Summarize(lab.Result{ID: "S1", Error: "boom"})
	assert.Equal(t, lab.VerdictError, s.Verdict)
	assert.Equal(t, "—", s.Unsafe, "an error shows no half-measured figures")
}

// all stands alone, and a scenario named twice would run twice: both are refused.
func TestSelectRefusesAllWithNamesAndRepeats(t *testing.T) {
	for args, want := range map[string]string{
		"all S10":    "all runs every scenario: give it alone, or only scenario names (got all S10)",
		"S10 s10":    "scenario S10 is named twice",
		"S1 nope":    `unknown scenario "nope"`,
		"S10 --json": `unknown scenario "--json": flags come before the scenario names (loadtest lab --json S10)`,
	} {
		_, err := lab.Select(strings.Fields(args))
		assert.ErrorContains(t, err, want, args)
	}
	sc, err := lab.Select([]string{"S3", "s1"})
	require.NoError(t, err)
	assert.Equal(t, []string{"S3", "S1"}, []string{sc[0].ID, sc[1].ID})
	all, err := lab.Select([]string{"ALL"})
	require.NoError(t, err)
	assert.Len(t, all, 12)
}
