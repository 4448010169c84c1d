package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"idemshop/internal/platform/problem"
)

// ErrBodyNotJSON is returned by Fingerprint when a non-empty body is not a single JSON value.
var ErrBodyNotJSON = errors.New("request body is not a single JSON value")

// ErrDuplicateName is returned (with ErrBodyNotJSON) by Fingerprint when an object of the body, at any
// depth, has a member name twice; the error is a DuplicateNameError, which names it.
var ErrDuplicateName = errors.New("a member name appears twice in one object")

// DuplicateNameError is Fingerprint's error for a body with member Name twice in one object. It is
// ErrDuplicateName and ErrBodyNotJSON (errors.Is).
type DuplicateNameError struct{ Name string }

func (e DuplicateNameError) Error() string {
	return fmt.Sprintf("member %q appears twice in one object", e.Name)
}

// Is makes the error both sentinels.
func (e DuplicateNameError) Is(target error) bool {
	return target == ErrDuplicateName || target == ErrBodyNotJSON
}

// Fingerprint identifies a request so that a reused key with a different request can be refused
// (IETF draft §2.4 leaves the choice of fingerprint to the server). It is the hex SHA-256 of
// method, path and the canonical JSON of body, separated by newlines.
//
// Canonical JSON here means: decoded and re-encoded with object keys sorted and no insignificant
// whitespace, so key order and whitespace do not change the fingerprint. Numbers keep their literal
// text (2 and 2.0 differ), and so do strings after unescaping. An empty body and an empty object ({})
// are canonicalised to "": one request (pay takes either). An object with a member name twice is
// ErrDuplicateName (ErrBodyNotJSON too): decoding keeps the last and drops the others without a word,
// so a body that reads as one request to a first-wins parser would be answered as another.
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
	if problem.BlankJSON(body) {
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
	// Decoding keeps the last of two members with one name, without a word: a body whose decoded
	// objects hold fewer names than the body has name separators had a name twice. (Counting costs a
	// pass over the bytes; naming the duplicate, a pass over the tokens, only then.)
	if members(v) != colons(body) {
		return nil, DuplicateNameError{Name: duplicateName(body)}
	}
	// encoding/json writes map keys in sorted order, which is what makes this canonical.
	out, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("re-encode body: %w", err)
	}
	if string(out) == "{}" {
		return nil, nil
	}
	return out, nil
}

// members counts the members of every object in v, a decoded JSON value.
func members(v any) int {
	n := 0
	switch t := v.(type) {
	case map[string]any:
		n = len(t)
		for _, e := range t {
			n += members(e)
		}
	case []any:
		for _, e := range t {
			n += members(e)
		}
	}
	return n
}

// colons counts the colons of body, a valid JSON text, outside its strings: one per object member.
func colons(body []byte) int {
	n, inString, escaped := 0, false, false
	for _, c := range body {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case !inString && c == ':':
			n++
		}
	}
	return n
}

// duplicateName returns the first member name that appears twice in one object of body (valid JSON),
// names compared after unescaping, or "" if none does. It walks the tokens, with one frame per open
// object or array: in an object, a string is a name when a name is due.
func duplicateName(body []byte) string {
	type frame struct {
		names    map[string]bool // nil for an array
		wantName bool
	}
	var stack []frame
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := dec.Token()
		if err != nil {
			return "" // io.EOF
		}
		if len(stack) > 0 && stack[len(stack)-1].wantName {
			top := &stack[len(stack)-1]
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
			} else {
				name, _ := tok.(string)
				if top.names[name] {
					return name
				}
				top.names[name], top.wantName = true, false
				continue
			}
		} else {
			switch tok {
			case json.Delim('{'):
				stack = append(stack, frame{names: map[string]bool{}, wantName: true})
				continue
			case json.Delim('['):
				stack = append(stack, frame{})
				continue
			case json.Delim(']'):
				stack = stack[:len(stack)-1]
			}
		}
		// A value ended (a scalar, or an object or array just closed): in an object, a name is due.
		if len(stack) > 0 && stack[len(stack)-1].names != nil {
			stack[len(stack)-1].wantName = true
		}
	}
}
