package idempotency_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"idemshop/internal/idempotency"
)

func ExampleFingerprint() {
	a, _ := idempotency.Fingerprint("POST", "/v1/orders", []byte(`{"product_id":1,"quantity":2}`))
	b, _ := idempotency.Fingerprint("POST", "/v1/orders", []byte("{ \"quantity\" : 2,\n  \"product_id\": 1 }"))
	c, _ := idempotency.Fingerprint("POST", "/v1/orders", []byte(`{"product_id":1,"quantity":3}`))
	fmt.Println(a == b, a == c, len(a))
	// Output: true false 64
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	base := `{"product_id":1,"quantity":2}`
	fp := func(method, path, body string) string {
		t.Helper()
		s, err := idempotency.Fingerprint(method, path, []byte(body))
		require.NoError(t, err)
		return s
	}
	want := fp("POST", "/v1/orders", base)
	cases := []struct {
		name         string
		method, path string
		body         string
		same         bool
	}{
		{"identical", "POST", "/v1/orders", base, true},
		{"keys reordered", "POST", "/v1/orders", `{"quantity":2,"product_id":1}`, true},
		{"whitespace", "POST", "/v1/orders", " {\n\t\"product_id\" : 1 ,\r\n \"quantity\":2 }\n", true},
		{"other value", "POST", "/v1/orders", `{"product_id":1,"quantity":3}`, false},
		{"other number literal", "POST", "/v1/orders", `{"product_id":1,"quantity":2.0}`, false},
		{"extra field", "POST", "/v1/orders", `{"product_id":1,"quantity":2,"note":"x"}`, false},
		{"other method", "PUT", "/v1/orders", base, false},
		{"other path", "POST", "/v1/orders/1/pay", base, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := fp(tc.method, tc.path, tc.body)
			assert.Equal(t, tc.same, got == want)
		})
	}
}

func TestFingerprintNestedObjects(t *testing.T) {
	t.Parallel()
	a, err := idempotency.Fingerprint("POST", "/p", []byte(`{"a":{"x":1,"y":[{"q":1,"p":2}]},"b":null}`))
	require.NoError(t, err)
	b, err := idempotency.Fingerprint("POST", "/p", []byte(`{"b":null,"a":{"y":[{"p":2,"q":1}],"x":1}}`))
	require.NoError(t, err)
	assert.Equal(t, a, b)
}

func TestFingerprintRejectsNonJSON(t *testing.T) {
	t.Parallel()
	// The last five are blanks to bytes.TrimSpace, not to JSON (RFC 8259 §2): not "no body".
	for _, body := range []string{`{`, `{"a":1}{"b":2}`, `{"a":1} x`, `nope`, "\u00a0", "\u2028", "\u0085", "\v", " \f\n"} {
		_, err := idempotency.Fingerprint("POST", "/v1/orders", []byte(body))
		assert.ErrorIs(t, err, idempotency.ErrBodyNotJSON, body)
	}
	empty, err := idempotency.Fingerprint("POST", "/v1/orders/1/pay", nil)
	require.NoError(t, err)
	blank, err := idempotency.Fingerprint("POST", "/v1/orders/1/pay", []byte(" \n"))
	require.NoError(t, err)
	assert.Equal(t, empty, blank, "an empty and a blank body are the same request")
}

// Property: however a JSON object is laid out (key order, whitespace), its fingerprint is the same.
func TestFingerprintIgnoresLayoutProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		m := rapid.MapOf(rapid.StringMatching(`[a-z_]{1,8}`),
			rapid.OneOf(rapid.Int64().AsAny(), rapid.String().AsAny(), rapid.Bool().AsAny())).Draw(rt, "object")
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		perm := rapid.Permutation(keys).Draw(rt, "order")
		ws := rapid.SampledFrom([]string{"", " ", "\n", "\t", "  \r\n"}).Draw(rt, "ws")
		var b strings.Builder
		b.WriteString("{" + ws)
		for i, k := range perm {
			if i > 0 {
				b.WriteString("," + ws)
			}
			kb, _ := json.Marshal(k)
			vb, _ := json.Marshal(m[k])
			b.WriteString(string(kb) + ws + ":" + ws + string(vb))
		}
		b.WriteString(ws + "}")
		compact, err := json.Marshal(m)
		require.NoError(rt, err)
		a, err := idempotency.Fingerprint("POST", "/p", compact)
		require.NoError(rt, err)
		c, err := idempotency.Fingerprint("POST", "/p", []byte(b.String()))
		require.NoError(rt, err)
		require.Equal(rt, a, c, "layout %q", b.String())
	})
}

// A member name twice in one object, at any depth, is refused, and named: decoding keeps the last, so
// the body would be answered as a request that a first-wins reader does not see in it.
func TestFingerprintRefusesANameTwice(t *testing.T) {
	t.Parallel()
	for body, dup := range map[string]string{
		`{"product_id":2,"product_id":1,"quantity":2}`: "product_id",
		`{"a":{"x":1,"x":2}}`:                          "x",
		`{"a":1,"\u0061":2}`:                           "a", // the same name once unescaped
		`{"a":[{"a":1}],"a":2}`:                        "a",
		`[{"a":1,"b":{"c":[1,{"d":1,"d":2}]}}]`:        "d",
		`{"a:b":"x:\"y:z\\","a:b":1}`:                  "a:b",
		`[{"a":1},{"a":2}]`:                            "", // two objects, a name each
		`{"a":{"b":1},"b":2}`:                          "",
		`{"a":{},"b":[],"c":[[],{}],"d":null}`:         "",
		`{"a:b":"x:\"y:z\\","b":"::"}`:                 "", // colons and escaped quotes inside strings
	} {
		_, err := idempotency.Fingerprint("POST", "/v1/orders", []byte(body))
		if dup == "" {
			assert.NoError(t, err, body)
			continue
		}
		assert.ErrorIs(t, err, idempotency.ErrDuplicateName, body)
		assert.ErrorIs(t, err, idempotency.ErrBodyNotJSON, body)
		assert.ErrorContains(t, err, fmt.Sprintf("%q", dup), body)
	}
}

// No body and an empty object are one request: pay takes either, and a retry may send the other.
func TestFingerprintEmptyObjectIsNoBody(t *testing.T) {
	t.Parallel()
	fp := func(body string) string {
		s, err := idempotency.Fingerprint("POST", "/v1/orders/1/pay", []byte(body))
		require.NoError(t, err)
		return s
	}
	assert.Equal(t, fp(""), fp("{}"))
	assert.Equal(t, fp(""), fp(" {\n} "))
	assert.NotEqual(t, fp(""), fp("[]"))
	assert.NotEqual(t, fp(""), fp(`{"a":1}`))
}
