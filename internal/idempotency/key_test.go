package idempotency_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"idemshop/internal/idempotency"
	"idemshop/internal/platform/problem"
)

func TestKeyFromHeader(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		values  []string
		want    string
		wantErr error
	}{
		{"missing", nil, "", idempotency.ErrKeyMissing},
		{"empty", []string{""}, "", idempotency.ErrKeyInvalid},
		{"empty quoted", []string{`""`}, "", idempotency.ErrKeyInvalid},
		{"plain", []string{"order-123"}, "order-123", nil},
		{"structured-field string", []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{"escaped quote", []string{`"q\"x"`}, `q"x`, nil},
		{"escaped backslash", []string{`"a\\b"`}, `a\b`, nil},
		{"bare quote inside the quotes", []string{`"a"b"`}, "", idempotency.ErrKeyInvalid},
		{"other escape", []string{`"a\b"`}, "", idempotency.ErrKeyInvalid},
		{"escape at the end", []string{`"a\"`}, "", idempotency.ErrKeyInvalid},
		{"quote inside a bare key", []string{`q"x`}, `q"x`, nil},
		// Begun as an sf-string, a value must be one whole: not a key of its own as sent.
		{"unterminated quote", []string{`"abc`}, "", idempotency.ErrKeyInvalid},
		{"a lone quote", []string{`"`}, "", idempotency.ErrKeyInvalid},
		{"sf-string with a parameter", []string{`"abc";x=1`}, "", idempotency.ErrKeyInvalid},
		{"sf-string with a quoted parameter", []string{`"abc";x="y"`}, "", idempotency.ErrKeyInvalid},
		{"255 chars", []string{strings.Repeat("k", 255)}, strings.Repeat("k", 255), nil},
		{"256 chars", []string{strings.Repeat("k", 256)}, "", idempotency.ErrKeyInvalid},
		{"space inside is printable", []string{"a b"}, "a b", nil},
		{"tab", []string{"a\tb"}, "", idempotency.ErrKeyInvalid},
		{"non-ASCII", []string{"clé"}, "", idempotency.ErrKeyInvalid},
		{"DEL", []string{"a\x7f"}, "", idempotency.ErrKeyInvalid},
		{"two header lines", []string{"a", "b"}, "", idempotency.ErrKeyInvalid},
		// Two lines joined by an intermediary (RFC 9110 §5.3) are one line with a comma: still two keys.
		{"two keys joined into one line", []string{"a, b"}, "", idempotency.ErrKeyInvalid},
		{"a bare comma", []string{"a,b"}, "", idempotency.ErrKeyInvalid},
		{"a comma in a quoted key", []string{`"a,b"`}, "a,b", nil},
	}
	// What the problem's detail says where it is not the code's default text.
	details := map[string]string{
		"two header lines":              "Idempotency-Key sent 2 times",
		"two keys joined into one line": "holds a comma outside a quoted string",
		"a bare comma":                  "holds a comma outside a quoted string",
	}
	for _, name := range []string{"bare quote inside the quotes", "other escape", "escape at the end", "unterminated quote",
		"a lone quote", "sf-string with a parameter", "sf-string with a quoted parameter"} {
		details[name] = "begins with a quote but is not one RFC 8941 string"
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tc.values {
				h.Add(idempotency.Header, v)
			}
			got, err := idempotency.KeyFromHeader(h)
			if tc.wantErr != nil {
				assert.ErrorIs(t, err, tc.wantErr)
				var p *problem.Error
				if d, ok := details[tc.name]; ok && assert.ErrorAs(t, err, &p) {
					assert.Contains(t, p.Detail, d)
				}
				return
			}
			assert.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}
