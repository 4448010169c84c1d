// Package paysig signs and verifies payment callbacks. payments-mock signs every callback it sends; the
// orders callback route verifies it before it trusts a single byte of the body.
//
// The header is
//
//	X-Pay-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>
//
// The timestamp is inside the MAC, so a captured callback cannot be replayed with a fresh t, and the
// verifier refuses a t further than the tolerance (300 s by default) from its clock, so an old capture
// cannot be replayed at all. The MAC covers the raw body bytes: verify before any JSON decode, because a
// decode and re-encode can change bytes the sender signed.
//
// A header may carry several v1 entries. A sender that rotates its secret signs with the old and the new
// secret for a while, and a verifier that knows either one accepts.
package paysig

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Header is the HTTP header that carries the signature.
const Header = "X-Pay-Signature"

// DefaultTolerance is how far, in either direction, a signature's t may be from the verifier's clock.
const DefaultTolerance = 300 * time.Second

// Limits of a header the parser accepts. They bound the work an attacker can cause per request.
const (
	maxHeaderLen  = 1024
	maxSignatures = 8
)

// The verdicts of Verify. Each is returned wrapped with detail, so test them with errors.Is. All four
// mean "do not trust this callback"; the orders callback route answers 401 to each.
var (
	// ErrMissing: the header is absent or empty.
	ErrMissing = errors.New("paysig: signature header missing")
	// ErrMalformed: the header is not t=<digits>,v1=<64 hex>[,v1=...].
	ErrMalformed = errors.New("paysig: signature header malformed")
	// ErrStale: the signature is authentic but t is outside the tolerance (a replay or a skewed clock).
	ErrStale = errors.New("paysig: signature timestamp outside tolerance")
	// ErrMismatch: no v1 entry matches the body and t under the secret (tampered, or the wrong secret).
	ErrMismatch = errors.New("paysig: signature mismatch")
)

// Sign returns the X-Pay-Signature header value for body sent at t (truncated to whole seconds):
// "t=<unix>,v1=<64 hex digits>".
func Sign(secret []byte, t time.Time, body []byte) string {
	return SignRotating(t, body, secret)
}

// SignRotating is Sign with one v1 entry per secret. While rotating, pass the new secret and the old
// ones: a receiver that still knows only an old secret keeps accepting.
func SignRotating(t time.Time, body []byte, secret []byte, older ...[]byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	var b strings.Builder
	b.WriteString("t=")
	b.WriteString(ts)
	for _, s := range append([][]byte{secret}, older...) {
		b.WriteString(",v1=")
		b.WriteString(hex.EncodeToString(mac(s, ts, body)))
	}
	return b.String()
}

// mac is HMAC-SHA256(secret, "<t>.<body>"), t as it is written in the header.
func mac(secret []byte, t string, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(t))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Parsed is a syntactically valid header: the unix timestamp in seconds, as sent (T, the bytes the MAC
// covers) and as a number (Timestamp, the one the tolerance is checked on), and the raw 32-byte MACs of
// its v1 entries (at least one).
type Parsed struct {
	T          string
	Timestamp  int64
	Signatures [][]byte
}

// ParseHeader parses a header value. Entries are comma-separated key=value pairs; spaces around an entry
// are ignored; exactly one t (decimal, no sign) and at least one v1 (64 hex digits) are required; entries
// with other keys are ignored so that a future scheme (v2=) does not break old verifiers. Any other shape
// is ErrMalformed; an empty value is ErrMissing.
func ParseHeader(h string) (Parsed, error) {
	var p Parsed
	if strings.TrimSpace(h) == "" {
		return p, ErrMissing
	}
	if len(h) > maxHeaderLen {
		return p, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, maxHeaderLen)
	}
	seenT := false
	for entry := range strings.SplitSeq(h, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(entry), "=")
		if !ok || k == "" {
			return p, fmt.Errorf("%w: entry %q is not key=value", ErrMalformed, entry)
		}
		switch k {
		case "t":
			if seenT {
				return p, fmt.Errorf("%w: more than one t", ErrMalformed)
			}
			seenT = true
			ts, err := parseUnix(v)
			if err != nil {
				return p, err
			}
			p.T, p.Timestamp = v, ts
		case "v1":
			if len(p.Signatures) == maxSignatures {
				return p, fmt.Errorf("%w: more than %d v1 entries", ErrMalformed, maxSignatures)
			}
			sig, err := hex.DecodeString(v)
			if err != nil || len(sig) != sha256.Size {
				return p, fmt.Errorf("%w: v1 must be %d hex digits", ErrMalformed, 2*sha256.Size)
			}
			p.Signatures = append(p.Signatures, sig)
		}
	}
	if !seenT {
		return p, fmt.Errorf("%w: no t entry", ErrMalformed)
	}
	if len(p.Signatures) == 0 {
		return p, fmt.Errorf("%w: no v1 entry", ErrMalformed)
	}
	return p, nil
}

// parseUnix accepts only plain decimal digits: strconv alone would also take "+5" and "-5", and a
// signature over "+5." must not be confused with one over "5.".
func parseUnix(v string) (int64, error) {
	if v == "" || len(v) > 19 {
		return 0, fmt.Errorf("%w: t must be 1 to 19 decimal digits", ErrMalformed)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, fmt.Errorf("%w: t must be decimal digits", ErrMalformed)
		}
	}
	ts, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: t out of range", ErrMalformed)
	}
	return ts, nil
}

// Verifier checks callback signatures. Secret must be non-empty. Tolerance <= 0 means DefaultTolerance;
// a nil Now means time.Now. A Verifier is safe for concurrent use.
type Verifier struct {
	Secret    []byte
	Tolerance time.Duration
	Now       func() time.Time
}

// Verify checks header against the raw body and returns nil, or an error that errors.Is one of
// ErrMissing, ErrMalformed, ErrMismatch or ErrStale. The MAC is checked before the timestamp, so ErrStale
// is only ever said about an authentic callback (an old one replayed), never about a forgery.
func (v Verifier) Verify(header string, body []byte) error {
	if len(v.Secret) == 0 {
		// A verifier with no secret would accept an HMAC anyone can compute; refuse everything.
		return fmt.Errorf("%w: verifier has no secret configured", ErrMismatch)
	}
	p, err := ParseHeader(header)
	if err != nil {
		return err
	}
	// Over t as sent, not as reformatted: "t=0<ts>" signed as "<ts>." was accepted, and a sender that
	// signed the "0<ts>." it sent was refused. The MAC covers the bytes on the wire.
	want := mac(v.Secret, p.T, body)
	matched := false
	for _, sig := range p.Signatures {
		// hmac.Equal runs in constant time: a byte-by-byte compare that stops at the first difference
		// would let an attacker find the MAC one byte at a time by timing the 401s.
		if hmac.Equal(sig, want) {
			matched = true
		}
	}
	if !matched {
		return ErrMismatch
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	tol := v.Tolerance
	if tol <= 0 {
		tol = DefaultTolerance
	}
	// The parser admits only t >= 0, so with a clock after 1970 the difference cannot overflow.
	skew := now().Unix() - p.Timestamp
	if skew < 0 {
		skew = -skew // a t in the future is as suspicious as one in the past
	}
	if skew > int64(tol/time.Second) {
		return fmt.Errorf("%w: t=%d is %d s from now (tolerance %s)", ErrStale, p.Timestamp, skew, tol)
	}
	return nil
}
