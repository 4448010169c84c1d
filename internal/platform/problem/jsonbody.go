package problem

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// DecodeJSON decodes body strictly into v: unknown fields, trailing data, wrong types and syntax errors
// are all ErrMalformedBody with a detail that names the problem.
func DecodeJSON(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		var synErr *json.SyntaxError
		switch {
		case errors.Is(err, io.EOF):
			return ErrMalformedBody.withDetail("request body is empty").Wrap(err)
		case errors.As(err, &typeErr):
			return ErrMalformedBody.withDetail(fmt.Sprintf("field %q must be a %s", typeErr.Field, typeErr.Type)).Wrap(err)
		case errors.As(err, &synErr):
			return ErrMalformedBody.withDetail(fmt.Sprintf("JSON syntax error at byte %d", synErr.Offset)).Wrap(err)
		default:
			// Unknown fields come back as a plain error: `json: unknown field "x"`.
			return ErrMalformedBody.withDetail(err.Error()).Wrap(err)
		}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ErrMalformedBody.withDetail("trailing data after the JSON value")
	}
	return nil
}

func (e *Error) withDetail(d string) *Error {
	c := *e
	c.Detail = d
	return &c
}
