package paysig_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/paysig"
)

var (
	secret = []byte("idemshop-demo-webhook-secret")
	now    = time.Unix(1_800_000_000, 0)
	body   = []byte(`{"event_id":"evt_1","payment_id":"pay_1","status":"SUCCESS","amount_cents":1999}`)
)

func verifier() paysig.Verifier {
	return paysig.Verifier{Secret: secret, Now: func() time.Time { return now }}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	valid := paysig.Sign(secret, now, body)
	ts := strconv.FormatInt(now.Unix(), 10)
	// The MAC covers t as it is written: "0<ts>" is its own string, signed as such or not at all.
	macOver := func(signed string) string {
		h := hmac.New(sha256.New, secret)
		h.Write([]byte(signed))
		return hex.EncodeToString(h.Sum(nil))
	}
	cases := []struct {
		name    string
		header  string
		body    []byte
		wantErr error
	}{
		{"valid", valid, body, nil},
		{"valid at the edge of the tolerance", paysig.Sign(secret, now.Add(-300*time.Second), body), body, nil},
		{"valid from a clock slightly ahead", paysig.Sign(secret, now.Add(299*time.Second), body), body, nil},
		{"spaces around entries", strings.ReplaceAll(valid, ",", " , "), body, nil},
		{"unknown scheme ignored", valid + ",v2=zzz", body, nil},
		{"rotation: new secret first, old known", paysig.SignRotating(now, body, []byte("new"), secret), body, nil},
		{"tampered body", valid, []byte(strings.Replace(string(body), "1999", "9999", 1)), paysig.ErrMismatch},
		{"body with trailing newline", valid, append(append([]byte{}, body...), '\n'), paysig.ErrMismatch},
		{"t with a leading zero, signed as sent", "t=0" + ts + ",v1=" + macOver("0"+ts+"."+string(body)), body, nil},
		{"t with a leading zero, signed as another t", "t=0" + ts + ",v1=" + macOver(ts+"."+string(body)), body, paysig.ErrMismatch},
		{"tampered t", strings.Replace(valid, "t="+ts, "t="+strconv.FormatInt(now.Unix()+1, 10), 1), body, paysig.ErrMismatch},
		{"stale t", paysig.Sign(secret, now.Add(-301*time.Second), body), body, paysig.ErrStale},
		{"t from the future", paysig.Sign(secret, now.Add(301*time.Second), body), body, paysig.ErrStale},
		{"wrong secret", paysig.Sign([]byte("not-the-secret"), now, body), body, paysig.ErrMismatch},
		{"missing header", "", body, paysig.ErrMissing},
		{"blank header", "   ", body, paysig.ErrMissing},
		{"no t", "v1=" + strings.Repeat("ab", 32), body, paysig.ErrMalformed},
		{"no v1", "t=" + ts, body, paysig.ErrMalformed},
		{"two t", valid + ",t=" + ts, body, paysig.ErrMalformed},
		{"signed t", strings.Replace(valid, "t=", "t=+", 1), body, paysig.ErrMalformed},
		{"negative t", "t=-1,v1=" + strings.Repeat("ab", 32), body, paysig.ErrMalformed},
		{"short v1", "t=" + ts + ",v1=abcd", body, paysig.ErrMalformed},
		{"non-hex v1", "t=" + ts + ",v1=" + strings.Repeat("zz", 32), body, paysig.ErrMalformed},
		{"not key=value", "garbage", body, paysig.ErrMalformed},
		{"empty key", "=1," + valid, body, paysig.ErrMalformed},
		{"too many v1", valid + strings.Repeat(",v1="+strings.Repeat("ab", 32), 8), body, paysig.ErrMalformed},
		{"huge header", valid + "," + strings.Repeat("x=y,", 500), body, paysig.ErrMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := verifier().Verify(tc.header, tc.body)
			if tc.wantErr == nil {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, tc.wantErr)
		})
	}
}

// The length cap bounds the parsing one request can cause, whatever the header holds: a valid
// signature padded with an entry the parser otherwise skips (an unknown v2) is refused past 1024
// bytes, and accepted at exactly 1024. Guards the paysig-header-cap mutant (internal/mutants).
func TestVerifyRefusesAHeaderLongerThanTheCap(t *testing.T) {
	t.Parallel()
	const limit = 1024 // maxHeaderLen
	valid := paysig.Sign(secret, now, body)
	padded := func(n int) string {
		pad := ",v2="
		return valid + pad + strings.Repeat("a", n-len(valid)-len(pad))
	}
	atLimit, over := padded(limit), padded(limit+1)
	require.Len(t, atLimit, limit)
	require.Len(t, over, limit+1)

	assert.NoError(t, verifier().Verify(atLimit, body), "a valid header of exactly the cap")
	err := verifier().Verify(over, body)
	assert.ErrorIs(t, err, paysig.ErrMalformed, "one byte over the cap")
	_, err = paysig.ParseHeader(over)
	assert.ErrorIs(t, err, paysig.ErrMalformed)
}

func TestVerifyRefusesEverythingWithoutASecret(t *testing.T) {
	t.Parallel()
	v := paysig.Verifier{Now: func() time.Time { return now }}
	err := v.Verify(paysig.Sign(nil, now, body), body)
	assert.ErrorIs(t, err, paysig.ErrMismatch)
}

func TestVerifyDefaultsToRealClockAnd300s(t *testing.T) {
	t.Parallel()
	v := paysig.Verifier{Secret: secret}
	assert.NoError(t, v.Verify(paysig.Sign(secret, time.Now(), body), body))
	assert.ErrorIs(t, v.Verify(paysig.Sign(secret, time.Now().Add(-10*time.Minute), body), body), paysig.ErrStale)
}

func TestVerifyCustomTolerance(t *testing.T) {
	t.Parallel()
	v := verifier()
	v.Tolerance = 10 * time.Second
	assert.NoError(t, v.Verify(paysig.Sign(secret, now.Add(-10*time.Second), body), body))
	assert.ErrorIs(t, v.Verify(paysig.Sign(secret, now.Add(-11*time.Second), body), body), paysig.ErrStale)
}

func TestParseHeaderRoundTrip(t *testing.T) {
	t.Parallel()
	p, err := paysig.ParseHeader(paysig.SignRotating(now, body, []byte("a"), []byte("b")))
	require.NoError(t, err)
	assert.Equal(t, now.Unix(), p.Timestamp)
	assert.Len(t, p.Signatures, 2)
}

// FuzzParseHeader checks that no header, however hostile, panics the parser, and that whatever it accepts
// has the shape Verify relies on. The seed corpus also runs as a normal test.
func FuzzParseHeader(f *testing.F) {
	for _, s := range []string{
		paysig.Sign(secret, now, body),
		paysig.SignRotating(now, body, []byte("a"), []byte("b")),
		"", " ", ",", "=", "t=", "v1=", "t=1,v1=", "t=1,,v1=00", "t=99999999999999999999,v1=" + strings.Repeat("0", 64),
		"t=1,v1=" + strings.Repeat("0", 64) + ",v2=x", "t=-0,v1=" + strings.Repeat("f", 64), "t=1\x00,v1=zz",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		p, err := paysig.ParseHeader(h)
		if err != nil {
			return
		}
		if p.Timestamp < 0 {
			t.Fatalf("accepted negative t %d from %q", p.Timestamp, h)
		}
		if len(p.Signatures) == 0 {
			t.Fatalf("accepted a header with no v1: %q", h)
		}
		for _, s := range p.Signatures {
			if len(s) != 32 {
				t.Fatalf("accepted a %d-byte v1 from %q", len(s), h)
			}
		}
		// Verify must agree with the parser and never panic either.
		_ = verifier().Verify(h, []byte(h))
	})
}
