package tcpproxy

import (
	"encoding/binary"
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
		for split := 1; split <= 7; split++ { // every group fed in pieces of split bytes
			var w commitWatch
			for i, group := range tc.stream {
				got := false
				for len(group) > 0 {
					n := min(split, len(group))
					got = w.feed(group[:n]) || got
					group = group[n:]
				}
				if got != tc.want[i] {
					t.Errorf("%s, pieces of %d bytes: group %d reported %v, want %v", tc.name, split, i, got, tc.want[i])
				}
			}
		}
	}
}
