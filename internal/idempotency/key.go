// Package idempotency implements the Idempotency-Key pattern (IETF draft
// "The Idempotency-Key HTTP Header Field", draft-ietf-httpapi-idempotency-key-header): a client-chosen
// key, a fingerprint of the request, and a stored response that is replayed for retries.
//
// The record is a small state machine (PROCESSING, COMPLETED, FAILED_RETRYABLE, FAILED_PERMANENT) with a
// fencing column, so that routes whose effect crosses a network boundary can reuse it. Routes whose
// effect fits in one local transaction use Guard (guard.go): the key row and the business change are
// committed together, or not at all (docs/design.md, "The ladder", step 1).
package idempotency

import (
	"fmt"
	"net/http"
	"strings"

	"idemshop/internal/platform/problem"
)

// Header is the request header that carries the key.
const Header = "Idempotency-Key"

// ReplayedHeader marks a response that was replayed from the store rather than produced by running the
// request again.
const ReplayedHeader = "Idempotent-Replayed"

// MaxKeyLen is the longest accepted key, in bytes.
const MaxKeyLen = 255

// Errors of the Idempotency-Key semantics table in docs/design.md; the codes are stable.
var (
	ErrKeyMissing = problem.New(problem.KindInvalid, "idempotency_key_missing",
		"this route requires an Idempotency-Key header")
	ErrKeyInvalid = problem.New(problem.KindInvalid, "idempotency_key_invalid",
		"Idempotency-Key must be 1 to 255 printable ASCII characters")
	// ErrKeyReused: the key was used before with a different request (IETF draft §2.7: 422).
	ErrKeyReused = problem.New(problem.KindUnprocessable, "idempotency_key_reused",
		"this Idempotency-Key was already used with a different request")
	// ErrKeyInUse: the first request with this key has not finished (IETF draft §2.7: 409).
	ErrKeyInUse = problem.New(problem.KindConflict, "idempotency_key_in_use",
		"a request with this Idempotency-Key is still being processed; retry later")
)

// KeyFromHeader returns the Idempotency-Key of h, validated. The draft defines the value as a
// Structured Field string (RFC 8941 §3.3.3), so a value that begins with a double quote is read as one,
// escapes and all, and must be one whole: `"abc"` is the key abc and `"q\"x"` the key q"x, while `"abc`
// (unterminated) and `"abc";x=1` (an sf-string with parameters, which this server does not read) are
// invalid rather than keys of their own. Any other value is the key as sent (a bare UUID is no
// sf-string, and is what most clients send). More than one header line is invalid, since the server
// could not tell which one the client meant; so is a bare value with a comma, which is what two lines
// become when an intermediary joins them into one (RFC 9110 §5.3), and which neither an sf-string nor
// an sf-token can be. A key with a comma in it is sent quoted.
func KeyFromHeader(h http.Header) (string, error) {
	vals := h.Values(Header)
	if len(vals) == 0 {
		return "", ErrKeyMissing
	}
	if len(vals) > 1 {
		return "", ErrKeyInvalid.WithDetail(fmt.Sprintf("%s sent %d times: one key per request", Header, len(vals)))
	}
	key := vals[0]
	if !strings.HasPrefix(key, `"`) && strings.Contains(key, ",") {
		return "", ErrKeyInvalid.WithDetail(Header + " holds a comma outside a quoted string: two keys joined " +
			`into one line, or a key that must be sent quoted ("a,b")`)
	}
	if strings.HasPrefix(key, `"`) {
		// The generic detail (1 to 255 printable characters) would point at the wrong cause here.
		notString := ErrKeyInvalid.WithDetail(Header + ` begins with a quote but is not one RFC 8941 string: ` +
			`end it with a quote, escape a quote or backslash inside it with a backslash (\" \\), add no parameters`)
		if len(key) < 2 || !strings.HasSuffix(key, `"`) {
			return "", notString
		}
		var ok bool
		if key, ok = unquote(key[1 : len(key)-1]); !ok {
			return "", notString
		}
	}
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	return key, nil
}

// unquote reads the inside of an sf-string (RFC 8941 §4.2.5): a backslash escapes the next character,
// which must be `"` or `\`; a bare `"` or any other escape makes the string invalid.
func unquote(s string) (string, bool) {
	if !strings.ContainsAny(s, `"\`) {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			return "", false
		case '\\':
			i++
			if i == len(s) || (s[i] != '"' && s[i] != '\\') {
				return "", false
			}
		}
		b.WriteByte(s[i])
	}
	return b.String(), true
}

// ValidateKey returns ErrKeyInvalid unless key is 1..MaxKeyLen bytes of printable ASCII (0x20-0x7E).
func ValidateKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return ErrKeyInvalid
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return ErrKeyInvalid
		}
	}
	return nil
}
