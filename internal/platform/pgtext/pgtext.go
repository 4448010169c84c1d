// Package pgtext makes untrusted text storable in PostgreSQL. PostgreSQL's text types refuse a NUL byte
// (SQLSTATE 22021, "invalid byte sequence") and any invalid UTF-8 in a UTF8 database, so one such byte
// in a request would fail the whole statement, and the transaction around it, on every resend. Text that
// comes from a request is therefore cleaned at the boundary, before it reaches SQL.
package pgtext

import (
	"strings"
	"unicode/utf8"
)

// Clean returns s as valid UTF-8 without NUL bytes, at most maxBytes long: every invalid byte sequence
// and every NUL becomes U+FFFD, and a long string is cut on a character boundary (never in the middle of
// a multi-byte character, which would make it invalid again). maxBytes <= 0 means no limit.
func Clean(s string, maxBytes int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	if maxBytes <= 0 || len(s) <= maxBytes {
		return s
	}
	cut := maxBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
