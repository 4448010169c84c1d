package problem

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"idemshop/internal/platform/logging"
)

// JSONSpace is the whitespace JSON allows around a value (RFC 8259 §2). bytes.TrimSpace also takes
// Unicode spaces (U+00A0, U+2028, NEL) and VT and FF for blanks, which no JSON parser does: a pay body
// of one U+00A0 was taken for "no body" and paid (a helper's finding, 2026-12-06).
const JSONSpace = " \t\n\r"

// BlankJSON reports whether body holds nothing but JSON whitespace: no value at all.
func BlankJSON(body []byte) bool { return len(bytes.Trim(body, JSONSpace)) == 0 }

// DecodeJSON decodes body strictly into v (a pointer to a struct): the body must be one JSON object
// whose member names match the struct's json tags exactly, each at most once. Unknown or wrongly-cased
// names, duplicates, null for a field that cannot hold it, trailing data, wrong types and syntax
// errors are all ErrMalformedBody with a detail that names the problem.
//
// Why exact names: encoding/json alone matches names case-insensitively and lets a later duplicate win,
// so {"product_id":3,"PRODUCT_ID":4} would decode as product 4 while the request fingerprint (canonical
// JSON, keys kept as sent) differs from {"PRODUCT_ID":4,"product_id":3}'s only in ways the decoder
// ignores: two different requests could share a fingerprint, or one meaning get two.
func DecodeJSON(body []byte, v any) error {
	return decodeJSON(body, v, false)
}

// DecodeJSONOpen is DecodeJSON for a body whose sender may add members in a later version (the payment
// platform's callback): a member v has no field for is skipped, once or many times. A member that names
// one of v's fields in another case (STATUS, Status) is still refused, and so is a field twice:
// encoding/json would let either override the field, so {"status":"FAILED","Status":"SUCCESS"} would
// mean SUCCESS here and FAILED to a reader that takes the first.
func DecodeJSONOpen(body []byte, v any) error {
	return decodeJSON(body, v, true)
}

func decodeJSON(body []byte, v any, open bool) error {
	// encoding/json decodes null into a struct as nothing at all, without an error: a body of null
	// would pass as {} (and fingerprint differently from it).
	if bytes.Equal(bytes.Trim(body, JSONSpace), []byte("null")) {
		return ErrMalformedBody.WithDetail("request body must be a JSON object")
	}
	if err := exactMembers(body, v, open); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if !open {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		var synErr *json.SyntaxError
		switch {
		case errors.Is(err, io.EOF):
			return ErrMalformedBody.WithDetail("request body is empty").Wrap(err)
		case errors.Is(err, io.ErrUnexpectedEOF): // Go's own words were the detail: "unexpected EOF"
			return ErrMalformedBody.WithDetail("request body ends before its JSON value does").Wrap(err)
		case errors.As(err, &typeErr) && typeErr.Field == "":
			return ErrMalformedBody.WithDetail("request body must be a JSON object").Wrap(err)
		case errors.As(err, &typeErr):
			return ErrMalformedBody.WithDetail(fmt.Sprintf("field %q must be of type %s", typeErr.Field, typeErr.Type)).Wrap(err)
		case errors.As(err, &synErr):
			return ErrMalformedBody.WithDetail(fmt.Sprintf("JSON syntax error at byte %d", synErr.Offset)).Wrap(err)
		default:
			// time.Time's own error quotes Go's layout ("2006-01-02T15:04:05Z07:00") and names no field.
			if name := badTimeField(body, v); name != "" {
				return ErrMalformedBody.WithDetail(fmt.Sprintf(`field %q must be an RFC 3339 time in a string, e.g. "2026-12-05T10:00:00Z"`,
					name)).Wrap(err)
			}
			// Unknown fields come back as a plain error: `json: unknown field "x"`, the name whole.
			return ErrMalformedBody.WithDetail(logging.Clip(err.Error())).Wrap(err)
		}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ErrMalformedBody.WithDetail("trailing data after the JSON value")
	}
	return nil
}

// exactMembers checks the top-level member names of a JSON object body against v's struct tags; open
// lets through the names that are no field's in any case. Bodies that are not objects are left to the
// decoder's own errors.
func exactMembers(body []byte, v any, open bool) error {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil
	}
	// encoding/json decodes null into a string, a number, a bool or a time as nothing at all, without
	// an error: {"occurred_at":null} would pass as a body without the member, and a field that must be
	// of a type would be left at its zero value. A field that can hold null (a pointer) takes it.
	allowed, nullable := fieldNames(t.Elem())
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil // a syntax error: the decoder reports it
		}
		name, _ := tok.(string)
		if !allowed[name] {
			if !open || foldsToField(name, allowed) {
				// Clipped: the detail is sent back, and a name of 500 kB came back whole (a helper's
				// finding, 2026-12-06).
				return ErrMalformedBody.WithDetail(fmt.Sprintf("unknown field %q (names are case-sensitive)", logging.Clip(name)))
			}
			if err := dec.Decode(new(json.RawMessage)); err != nil {
				return nil
			}
			continue
		}
		if seen[name] {
			return ErrMalformedBody.WithDetail(fmt.Sprintf("field %q appears more than once", name))
		}
		seen[name] = true
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil
		}
		if string(value) == "null" && !nullable[name] {
			return ErrMalformedBody.WithDetail(fmt.Sprintf("field %q must not be null", name))
		}
	}
	return nil
}

// fieldNames are the JSON member names of struct type t's fields (their tags), and which of them can
// hold null (a pointer, slice, map or interface field).
func fieldNames(t reflect.Type) (names, nullable map[string]bool) {
	names, nullable = map[string]bool{}, map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		names[name] = true
		switch f.Type.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
			nullable[name] = true
		}
	}
	return names, nullable
}

// DecodeClaimed is for the record of a body that was refused (an audit row): best effort, it fills v,
// a pointer to a struct, with the members of a JSON object body under v's exact field names, the first
// of each, and ignores every error. encoding/json alone would also take "Event_id" for "event_id", and
// the last of two, which is not what the refusal read.
func DecodeClaimed(body []byte, v any) {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return
	}
	allowed, _ := fieldNames(t.Elem())
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return
	}
	claimed := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			break
		}
		if name, _ := tok.(string); allowed[name] && claimed[name] == nil {
			claimed[name] = value
		}
	}
	// One member at a time: a value that does not decode (a time that is not one) stops json.Unmarshal
	// at that member, and would lose the members after it.
	for name, value := range claimed {
		if one, err := json.Marshal(map[string]json.RawMessage{name: value}); err == nil {
			_ = json.Unmarshal(one, v) // a member that does not decode stays zero; the others are kept
		}
	}
}

// foldsToField reports whether name is one of the allowed field names in another case, as encoding/json
// would match it (its folding is Unicode's simple folding, so ſ matches s and the Kelvin sign k).
func foldsToField(name string, allowed map[string]bool) bool {
	for field := range allowed {
		if strings.EqualFold(name, field) {
			return true
		}
	}
	return false
}

// badTimeField names the top-level member of body that v holds in a time.Time and that does not
// decode as one, or "" when there is none: encoding/json returns a time's error without the member's
// name. It runs only on a body that failed to decode.
func badTimeField(body []byte, v any) string {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return ""
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(body, &members) != nil {
		return ""
	}
	timeType := reflect.TypeFor[time.Time]()
	for i := 0; i < t.Elem().NumField(); i++ {
		f := t.Elem().Field(i)
		if f.Type != timeType && f.Type != reflect.PointerTo(timeType) {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		raw, ok := members[name]
		if !ok {
			continue
		}
		var tm *time.Time
		if json.Unmarshal(raw, &tm) != nil {
			return name
		}
	}
	return ""
}
