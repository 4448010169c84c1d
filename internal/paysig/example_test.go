package paysig_test

import (
	"errors"
	"fmt"
	"time"

	"idemshop/internal/paysig"
)

// The sender signs the exact bytes it puts on the wire; the receiver verifies those same bytes before it
// decodes any JSON, and maps every error to 401.
func Example() {
	secret := []byte("idemshop-demo-webhook-secret")
	sentAt := time.Unix(1_800_000_000, 0)
	body := []byte(`{"event_id":"evt_1","status":"SUCCESS"}`)

	header := paysig.Sign(secret, sentAt, body)
	fmt.Println(paysig.Header + ": " + header)

	v := paysig.Verifier{Secret: secret, Now: func() time.Time { return sentAt.Add(time.Minute) }}
	fmt.Println("valid:", v.Verify(header, body))

	err := v.Verify(header, []byte(`{"event_id":"evt_1","status":"FAILED"}`))
	fmt.Println("tampered body is a mismatch:", errors.Is(err, paysig.ErrMismatch))

	late := paysig.Verifier{Secret: secret, Now: func() time.Time { return sentAt.Add(time.Hour) }}
	fmt.Println("replayed an hour later is stale:", errors.Is(late.Verify(header, body), paysig.ErrStale))
	// Output:
	// X-Pay-Signature: t=1800000000,v1=d6903374d61982cdb62bed3a7adddb4a527d3e74a286aa080d183d9bf1b9bb41
	// valid: <nil>
	// tampered body is a mismatch: true
	// replayed an hour later is stale: true
}
