package tcpproxy

import (
	"encoding/binary"
	"strings"
	"testing"
)

func msg(typ byte, parts ...string) []byte {
	var body []byte
	for _, p := range parts {
		body = append(append(body, p...), 0)
	}
	b := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(4+len(body)))
	return append(b, body...)
}

func startup() []byte {
	b := make([]byte, 8, 32)
	binary.BigEndian.PutUint32(b[4:], 196608)
	b = append(append(b, "user\x00postgres\x00"...), 0)
	binary.BigEndian.PutUint32(b, uint32(len(b)))
	return b
}

// The watcher sees a COMMIT only once it has been sent whole (an Execute of a prepared COMMIT and its
// Sync, or a simple query holding one), whatever the chunks the bytes arrive in.
func TestCommitWatchFindsTheCommitInAnyChunking(t *testing.T) {
	prepare := append(append(msg('P', "s1", "SAVEPOINT audit"), msg('P', "s2", "COMMIT")...), msg('S')...)
	run := append(append(append(msg('B', "", "s1"), msg('E', "")...), append(msg('B', "", "s2"), msg('E', "")...)...), msg('S')...)
	for _, tc := range []struct {
		name   string
		stream [][]byte
		want   []bool // per message group fed
	}{
		{"prepare alone is not a commit", [][]byte{startup(), prepare}, []bool{false, false}},
		{"execute of the prepared COMMIT, then Sync", [][]byte{startup(), prepare, run}, []bool{false, false, true}},
		{"simple query", [][]byte{startup(), msg('Q', "ROLLBACK TO SAVEPOINT audit; COMMIT")}, []bool{false, true}},
		{"simple query without commit", [][]byte{startup(), msg('Q', "SELECT 1")}, []bool{false, false}},
		{"savepoint only", [][]byte{startup(), prepare, append(append(msg('B', "", "s1"), msg('E', "")...), msg('S')...)}, []bool{false, false, false}},
	} {
		commit := statementMatch(isCommit)
		for split := 1; split <= 7; split++ { // every group fed in pieces of split bytes
			var w commitWatch
			for i, group := range tc.stream {
				got := false
				for len(group) > 0 {
					n := min(split, len(group))
					got = w.feed(group[:n], &commit) || got
					group = group[n:]
				}
				if got != tc.want[i] {
					t.Errorf("%s, pieces of %d bytes: group %d reported %v, want %v", tc.name, split, i, got, tc.want[i])
				}
			}
		}
	}
}

// LoseNextAnswerTo's statement is one that is its own transaction: its Execute and Sync complete it, on
// a statement prepared (and named) by an earlier request of the same connection as pgx's cache does. An
// unarmed watch (nil) matches nothing and still learns the names.
func TestCommitWatchFindsAStatementByItsText(t *testing.T) {
	claim := statementMatch(func(sql string) bool { return strings.Contains(sql, "INSERT INTO idempotency_keys") })
	prepare := append(msg('P', "stmtcache_1", "INSERT INTO idempotency_keys (user_id) VALUES ($1) RETURNING *"), msg('S')...)
	run := append(append(msg('B', "", "stmtcache_1"), msg('E', "")...), msg('S')...)
	var w commitWatch
	if w.feed(startup(), &claim) || w.feed(prepare, nil) {
		t.Fatal("a startup or a Parse is no statement sent")
	}
	if w.feed(run, nil) {
		t.Error("an unarmed watch matched")
	}
	if !w.feed(run, &claim) {
		t.Error("the Execute of the named statement, then Sync, was not seen")
	}
	if w.feed(msg('Q', "SELECT 1"), &claim) {
		t.Error("another statement matched")
	}
}

// The answer to a lost COMMIT is described message by message, with an error's SQLSTATE and message
// and the transaction status of ReadyForQuery, so that a test's failure can say what the server did.
func TestDescribeAnswerNamesTheMessages(t *testing.T) {
	errResp := msg('E', "SERROR", "C57014", "Mcanceling statement due to user request", "")
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"committed", append(append(msg('C', "SAVEPOINT"), msg('C', "COMMIT")...), readyFor('I')...), "C C Z(I)"},
		{"failed batch", append(errResp, readyFor('E')...), "E(57014 canceling statement due to user request) Z(E)"},
		{"cut short", msg('C', "COMMIT")[:7], "(cut)"},
	} {
		if got := describeAnswer(tc.b); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// readyFor is a ReadyForQuery with transaction status s.
func readyFor(s byte) []byte { return []byte{'Z', 0, 0, 0, 5, s} }

// The proxy cuts the client only once the server's answer is whole: up to and including ReadyForQuery,
// however the bytes arrive.
func TestAnsweredWaitsForReadyForQuery(t *testing.T) {
	whole := append(append(msg('C', "SAVEPOINT"), msg('C', "COMMIT")...), readyFor('I')...)
	for i := range whole {
		if answered(whole[:i]) {
			t.Errorf("answered after %d of %d bytes", i, len(whole))
		}
	}
	if !answered(whole) {
		t.Error("not answered with ReadyForQuery in")
	}
}
