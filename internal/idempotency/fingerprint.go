package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// ErrBodyNotJSON is returned by Fingerprint when a non-empty body is not a single JSON value.
var ErrBodyNotJSON = errors.New("request body is not a single JSON value")

// Fingerprint identifies a request so that a reused key with a different request can be refused
// (IETF draft §2.4 leaves the choice of fingerprint to the server). It is the hex SHA-256 of
// method, path and the canonical JSON of body, separated by newlines.
//
// Canonical JSON here means: decoded and re-encoded with object keys sorted and no insignificant
// whitespace, so key order and whitespace do not change the fingerprint. Numbers keep their literal
// text (2 and 2.0 differ), and so do strings after unescaping. An empty body is canonicalised to "".
// path is the concrete request path (/v1/orders/7/pay), so the same key on another order differs.
func Fingerprint(method, path string, body []byte) (string, error) {
	canon, err := CanonicalJSON(body)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", method, path)
	h.Write(canon)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// CanonicalJSON re-encodes body with sorted object keys and no insignificant whitespace.
// It returns ErrBodyNotJSON for malformed JSON or trailing data.
func CanonicalJSON(body []byte) ([]byte, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // keep 12345678901234567890 exact instead of rounding it through float64
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBodyNotJSON, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: trailing data after the JSON value", ErrBodyNotJSON)
	}
	// encoding/json writes map keys in sorted order, which is what makes this canonical.
	out, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("re-encode body: %w", err)
	}
	return out, nil
}
