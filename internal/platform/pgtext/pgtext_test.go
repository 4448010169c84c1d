package pgtext_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"

	"idemshop/internal/platform/pgtext"
)

func TestClean(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		max      int
		want     string
	}{
		{"plain text is unchanged", "evt_1", 200, "evt_1"},
		{"NUL becomes U+FFFD", "evt\x00_1", 200, "evt\uFFFD_1"},
		{"invalid UTF-8 becomes U+FFFD", "evt\xff\xfe_1", 200, "evt\uFFFD_1"},
		{"cut on a character boundary", "ab€", 4, "ab"}, // € is 3 bytes: 5 in all, cut at 4 would split it
		{"cut exactly after a character", "ab€", 5, "ab€"},
		{"no limit", strings.Repeat("x", 500), 0, strings.Repeat("x", 500)},
		{"a limit inside the replacement char", "a\x00", 2, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := pgtext.Clean(tc.in, tc.max)
			assert.Equal(t, tc.want, got)
			assert.True(t, utf8.ValidString(got))
			assert.NotContains(t, got, "\x00")
		})
	}
}

// Whatever the bytes, the result is storable and within the limit.
func FuzzClean(f *testing.F) {
	f.Add("evt\x00\xff€€", 7)
	f.Fuzz(func(t *testing.T, s string, max int) {
		if max < 0 || max > 1000 {
			return
		}
		got := pgtext.Clean(s, max)
		if !utf8.ValidString(got) || strings.IndexByte(got, 0) >= 0 || (max > 0 && len(got) > max) {
			t.Fatalf("Clean(%q, %d) = %q", s, max, got)
		}
	})
}
