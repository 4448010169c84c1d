package tcpproxy

import (
	"bytes"
	"encoding/binary"
	"strings"
	"sync/atomic"
	"testing"
)

// PostgresForURL starts a proxy to the host of a postgres:// URL that can lose the answer to a COMMIT
// (LoseNextCommitAnswer), and returns the same URL pointing at the proxy. It reads what clients send
// as PostgreSQL's wire protocol (frontend messages, PostgreSQL docs §55.7), so it sees every
// connection from its first byte.
func PostgresForURL(t testing.TB, rawURL string) (*Proxy, string) {
	t.Helper()
	return forURL(t, rawURL, true)
}

// LoseNextCommitAnswer arms a one-shot fault: the next COMMIT a client sends reaches the server whole,
// and then the proxy closes that client's connection before any answer comes back. The server commits;
// the client sees its connection break after the request was written and cannot know whether it did.
// The server's side stays open until the server answers, so the COMMIT is never cut short.
func (p *Proxy) LoseNextCommitAnswer() { p.loseCommit.Store(true) }

// CommitAnswersLost counts the COMMIT answers this proxy has lost.
func (p *Proxy) CommitAnswersLost() int64 { return p.lostCommits.Load() }

// commitWatch follows one connection's frontend messages and reports when a COMMIT has been sent in
// full: a simple Query holding a COMMIT statement, or an Execute of a portal bound to a prepared COMMIT
// once its Sync has gone (the server runs the pipeline up to the Sync before it answers). It reads only
// the framing and those messages, and the bytes go on untouched. pgx's pgproto3.Backend would decode
// every message to re-encode it, and reads a SCRAM answer as a password message unless told the
// server's auth type, which only the server's side of the stream says.
type commitWatch struct {
	buf     []byte
	started bool              // past the startup message (which has no type byte)
	stmts   map[string]string // prepared statement name -> SQL
	portals map[string]string // portal name -> SQL of its statement
	pending bool              // an Execute of COMMIT waits for its Sync
}

// startup request codes that the server answers before the real startup message comes.
const (
	sslRequest    = 80877103
	gssEncRequest = 80877104
)

// feed takes the next bytes the client sent and reports whether a COMMIT has now been sent in full.
func (w *commitWatch) feed(b []byte) bool {
	if w.stmts == nil {
		w.stmts, w.portals = map[string]string{}, map[string]string{}
	}
	w.buf = append(w.buf, b...)
	committed := false
	for {
		if !w.started {
			if len(w.buf) < 8 {
				return committed
			}
			n := int(binary.BigEndian.Uint32(w.buf))
			if len(w.buf) < n {
				return committed
			}
			code := binary.BigEndian.Uint32(w.buf[4:])
			w.started = code != sslRequest && code != gssEncRequest
			w.buf = w.buf[n:]
			continue
		}
		if len(w.buf) < 5 {
			return committed
		}
		n := 1 + int(binary.BigEndian.Uint32(w.buf[1:]))
		if len(w.buf) < n {
			return committed
		}
		if w.message(w.buf[0], w.buf[5:n]) {
			committed = true
		}
		w.buf = w.buf[n:]
	}
}

// message reads one typed message and reports whether it completed the sending of a COMMIT.
func (w *commitWatch) message(typ byte, body []byte) bool {
	switch typ {
	case 'Q': // Query: simple protocol, statements separated by ';'
		for _, s := range strings.Split(cstring(body, 0), ";") {
			if isCommit(s) {
				return true
			}
		}
	case 'P': // Parse: statement name, SQL
		name := cstring(body, 0)
		w.stmts[name] = cstring(body, 1)
	case 'B': // Bind: portal name, statement name
		w.portals[cstring(body, 0)] = w.stmts[cstring(body, 1)]
	case 'E': // Execute: portal name
		if isCommit(w.portals[cstring(body, 0)]) {
			w.pending = true
		}
	case 'S': // Sync
		done := w.pending
		w.pending = false
		return done
	}
	return false
}

func isCommit(sql string) bool {
	s := strings.ToUpper(strings.TrimSpace(sql))
	return s == "COMMIT" || s == "END" || s == "COMMIT TRANSACTION" || s == "COMMIT WORK"
}

// cstring returns the i-th NUL-terminated string in b ("" if b has fewer).
func cstring(b []byte, i int) string {
	for ; i > 0; i-- {
		j := bytes.IndexByte(b, 0)
		if j < 0 {
			return ""
		}
		b = b[j+1:]
	}
	if j := bytes.IndexByte(b, 0); j >= 0 {
		return string(b[:j])
	}
	return ""
}

// pgState is what the proxy keeps for Postgres proxies.
type pgState struct {
	pg          bool // set before the proxy accepts: watch what clients send
	loseCommit  atomic.Bool
	lostCommits atomic.Int64
}
