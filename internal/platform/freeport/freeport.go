// Package freeport hands out loopback ports for a process to bind next (the soak's services and private
// infrastructure, the tests' binaries), from below the kernel's ephemeral range.
package freeport

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Addr returns a loopback address (127.0.0.1:port) nothing listens on right now, below the kernel's
// ephemeral port range when there is room there (ip_local_port_range, 32768–60999 by default). A port
// from the range (what a listen on port 0 picks) can be taken, between this check and the service's
// bind, as the local port of an outgoing connection: soak-ci's points-consumer then failed every start
// with "address already in use" (a pooled connection to the soak's private broker held it for the whole
// run), and the run reported 571 violations (2026-12-06). The ports are tried in turn from a start that depends on the
// process id, so that two processes on one machine (two soaks, two test binaries) do not try the same
// ones first, and none is handed out twice by one process (a port handed out may not be listened on
// yet, or only now and then, as rabbitmqctl's). RangeEnv (lo-hi) confines them to that range instead,
// for a machine shared with other users' services; an error when it is malformed or none of its ports
// is free and not handed out already (a range too small for the run: a soak runner's finding,
// 2026-12-07, where two of the soak's services were given one port).
func Addr() (string, error) {
	if v := os.Getenv(RangeEnv); v != "" {
		lo, hi, err := parseRange(v)
		if err != nil {
			return "", err
		}
		if a, ok := firstFree(lo, hi); ok {
			return a, nil
		}
		return "", fmt.Errorf("free port: none of %s=%s is free and not handed out already (%d handed out by this process)",
			RangeEnv, v, handedOut())
	}
	if lo, hi, ok := BelowEphemeral(); ok {
		if a, ok := firstFree(lo, hi); ok {
			return a, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// portCursor counts the ports Addr tried, so that each call goes on from the last.
var portCursor atomic.Int64

// handed holds the ports Addr returned in this process.
var handed = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

func handedOut() int {
	handed.Lock()
	defer handed.Unlock()
	return len(handed.ports)
}

// RangeEnv names the variable that confines Addr's ports: "lo-hi", both included.
const RangeEnv = "IDEMSHOP_PORT_RANGE"

// firstFree tries the ports lo..hi in turn, from a start that depends on the process id and goes on
// from the last call's, and returns the first it can listen on that it has not returned before.
func firstFree(lo, hi int) (string, bool) {
	handed.Lock()
	defer handed.Unlock()
	span, base := int64(hi-lo+1), int64(os.Getpid())*97
	for range span {
		port := lo + int((base+portCursor.Add(1))%span)
		if handed.ports[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			defer l.Close()
			handed.ports[port] = true
			return l.Addr().String(), true
		}
	}
	return "", false
}

// parseRange reads RangeEnv's "lo-hi" (1 <= lo <= hi <= 65535).
func parseRange(v string) (lo, hi int, err error) {
	a, b, found := strings.Cut(v, "-")
	lo, errLo := strconv.Atoi(strings.TrimSpace(a))
	hi, errHi := strconv.Atoi(strings.TrimSpace(b))
	if !found || errLo != nil || errHi != nil || lo < 1 || hi > 65535 || lo > hi {
		return 0, 0, fmt.Errorf("%s must be lo-hi, two ports with 1 <= lo <= hi <= 65535, got %q", RangeEnv, v)
	}
	return lo, hi, nil
}

// BelowEphemeral returns the ports from 10000 up to just below the kernel's ephemeral range, and
// false when that range cannot be read or leaves fewer than 1000 of them.
func BelowEphemeral() (lo, hi int, ok bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, false
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low-1-10000 < 1000 {
		return 0, 0, false
	}
	return 10000, low - 1, true
}
