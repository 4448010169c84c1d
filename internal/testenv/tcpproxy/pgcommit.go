package tcpproxy

import (
	"bytes"
	"encoding/binary"
	"fmt"
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
// the server runs it and answers, and the proxy swallows that answer and closes the client's
// connection. The server has committed (or refused, and then LostCommitAnswers says why); the client
// sees its connection break after the request was written and cannot know which.
//
// Cutting the client before the server had answered would not do: pgx, seeing its connection break,
// sends a CancelRequest for it (pgconn's asyncClose), and on a loaded machine that cancel reaches the
// server while the COMMIT's batch is still running, so the transaction rolls back (57014, seen in
// make test under load). That outcome is the plain "connection lost before COMMIT" case; this fault is
// the other one.
func (p *Proxy) LoseNextCommitAnswer() {
	commit := statementMatch(isCommit)
	p.lose.Store(&commit)
}

// LoseNextAnswerTo is LoseNextCommitAnswer for the next statement whose SQL contains fragment: one that
// is its own transaction (a single INSERT … RETURNING has no COMMIT) runs and commits, and its client
// never hears so.
func (p *Proxy) LoseNextAnswerTo(fragment string) {
	match := statementMatch(func(sql string) bool { return strings.Contains(sql, fragment) })
	p.lose.Store(&match)
}

// statementMatch says whether a statement's SQL is the one whose answer the armed fault loses.
type statementMatch func(sql string) bool

// CommitAnswersLost counts the answers this proxy has lost (LoseNextCommitAnswer, LoseNextAnswerTo).
func (p *Proxy) CommitAnswersLost() int64 { return p.lostCommits.Load() }

// LostCommitAnswers says what the server answered to each lost COMMIT, one line per answer, as message
// types with an error's SQLSTATE and message and ReadyForQuery's transaction status: "C C C Z(I)" for
// a SAVEPOINT, INSERT and COMMIT that ran, "E(57014 canceling statement due to user request) Z(E)" for
// a batch the server refused. For a test's failure message.
func (p *Proxy) LostCommitAnswers() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var lines []string
	for _, a := range p.lostAnswers {
		lines = append(lines, describeAnswer(a))
	}
	return strings.Join(lines, "\n")
}

// keepLostAnswer records the server's whole answer to a lost COMMIT.
func (p *Proxy) keepLostAnswer(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lostAnswers = append(p.lostAnswers, b)
}

// answered reports whether b, the server's bytes since a COMMIT went out, hold a whole ReadyForQuery:
// the server has answered everything up to the Sync (or the simple Query) that carried the COMMIT.
func answered(b []byte) bool {
	for {
		typ, _, rest, ok := nextMessage(b)
		if !ok {
			return false
		}
		if typ == 'Z' {
			return true
		}
		b = rest
	}
}

// nextMessage splits the first whole typed message off b (PostgreSQL docs §55.7: a type byte, then a
// length that counts itself and the body). ok is false while b holds less than a whole message, or a
// length too small to be one.
func nextMessage(b []byte) (typ byte, body, rest []byte, ok bool) {
	if len(b) < 5 {
		return 0, nil, b, false
	}
	n := 1 + int(binary.BigEndian.Uint32(b[1:]))
	if n < 5 || len(b) < n {
		return 0, nil, b, false
	}
	return b[0], b[5:n], b[n:], true
}

// commitWatch follows one connection's frontend messages and reports when a statement the armed fault
// matches (a COMMIT) has been sent in full: a simple Query holding it, or an Execute of a portal bound
// to it once its Sync has gone (the server runs the pipeline up to the Sync before it answers). It reads only
// the framing and those messages, and the bytes go on untouched. pgx's pgproto3.Backend would decode
// every message to re-encode it, and reads a SCRAM answer as a password message unless told the
// server's auth type, which only the server's side of the stream says.
type commitWatch struct {
	buf     []byte
	started bool              // past the startup message (which has no type byte)
	stmts   map[string]string // prepared statement name -> SQL
	portals map[string]string // portal name -> SQL of its statement
	pending bool              // an Execute of a matching statement waits for its Sync
}

// startup request codes that the server answers before the real startup message comes.
const (
	sslRequest    = 80877103
	gssEncRequest = 80877104
)

// feed takes the next bytes the client sent and reports whether a statement that match (nil: none)
// accepts has now been sent in full.
func (w *commitWatch) feed(b []byte, match *statementMatch) bool {
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
		typ, body, rest, ok := nextMessage(w.buf)
		if !ok {
			return committed
		}
		if w.message(typ, body, match) {
			committed = true
		}
		w.buf = rest
	}
}

// message reads one typed message and reports whether it completed the sending of a statement that
// match accepts.
func (w *commitWatch) message(typ byte, body []byte, match *statementMatch) bool {
	matches := func(sql string) bool { return match != nil && (*match)(sql) }
	switch typ {
	case 'Q': // Query: simple protocol, statements separated by ';'
		for _, s := range strings.Split(cstring(body, 0), ";") {
			if matches(s) {
				return true
			}
		}
	case 'P': // Parse: statement name, SQL
		name := cstring(body, 0)
		w.stmts[name] = cstring(body, 1)
	case 'B': // Bind: portal name, statement name
		w.portals[cstring(body, 0)] = w.stmts[cstring(body, 1)]
	case 'E': // Execute: portal name
		if matches(w.portals[cstring(body, 0)]) {
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
	pg          bool                           // set before the proxy accepts: watch what clients send
	lose        atomic.Pointer[statementMatch] // armed: the statement whose answer is lost next
	lostCommits atomic.Int64
	lostAnswers [][]byte // under mu: what the server answered to each lost COMMIT
}

// describeAnswer names the backend messages in b (PostgreSQL docs §55.7): the type letter, with an
// ErrorResponse's SQLSTATE and message and a ReadyForQuery's transaction status.
func describeAnswer(b []byte) string {
	var out []string
	for len(b) > 0 {
		typ, body, rest, ok := nextMessage(b)
		if !ok {
			out = append(out, "(cut)")
			break
		}
		switch {
		case typ == 'E':
			var code, text string
			for len(body) > 1 { // fields: a type byte, then a NUL-terminated string
				field, v := body[0], cstring(body[1:], 0)
				body = body[min(len(body), 1+len(v)+1):]
				switch field {
				case 'C':
					code = v
				case 'M':
					text = v
				}
			}
			out = append(out, fmt.Sprintf("E(%s %s)", code, text))
		case typ == 'Z' && len(body) == 1:
			out = append(out, fmt.Sprintf("Z(%c)", body[0]))
		default:
			out = append(out, string(typ))
		}
		b = rest
	}
	return strings.Join(out, " ")
}
