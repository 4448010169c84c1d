// Package scripts_test runs the shell scripts under scripts/ against the real services. A package of
// its own, so that a mutant of a script (make mutants) compiles this small test binary, not loadtest's.
package scripts_test

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/mutants"
	"idemshop/internal/testenv"
)

// scripts/workshop.sh (docs/workshop.md) starts the three on the ports it is given, each on its own port
// even with an HTTP_ADDR in the environment, on loopback only, with the platform calling back orders'
// port: an order paid through it ends PAID. Its state directory is its orders port's own; status exits
// 0 while all three are ready and 1 once stop has left nothing listening.
func TestWorkshopScriptRunsTheStackOnItsOwnPorts(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	env.Topology("") // the stack's, deleted at the end whatever happens
	port := func() string { _, p, _ := net.SplitHostPort(testenv.FreeAddr(t)); return p }
	orders, payments, points := port(), port(), port()
	bin, tmp := t.TempDir(), t.TempDir()
	script := func(arg string) (string, error) {
		cmd := workshopScript(t, arg)
		cmd.Env = append(os.Environ(), "BIN="+bin, "TMPDIR="+tmp, "WORKSHOP_DIR=",
			"WORKSHOP_ORDERS_PORT="+orders, "WORKSHOP_PAYMENTS_PORT="+payments, "WORKSHOP_POINTS_PORT="+points,
			"HTTP_ADDR=127.0.0.1:1", "DATABASE_URL="+env.DatabaseURL, "REDIS_URL="+env.RedisURL,
			"AMQP_URL="+env.AMQPURL, "REDIS_KEY_PREFIX="+env.Prefix, "AMQP_NAME_PREFIX="+env.Prefix,
			"LOG_LEVEL=warn", "SWEEP_INTERVAL=200ms")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := script("start")
	t.Cleanup(func() { _, _ = script("stop") })
	require.NoError(t, err, out)
	assert.Contains(t, out, "export ORDERS_URL=http://127.0.0.1:"+orders+" PAYMENTS_URL=http://127.0.0.1:"+payments)
	assert.FileExists(t, fmt.Sprintf("%s/idemshop-workshop-%d-%s/pids", tmp, os.Getuid(), orders))
	for _, p := range []string{orders, payments, points} {
		// Orders' lab routes reach payments-mock's admin API, which is for this machine alone.
		assert.Equal(t, []string{"127.0.0.1"}, listeningOn(t, p), "port %s listens on loopback only", p)
	}
	out, err = script("status")
	require.NoError(t, err, "status while all three are ready: %s", out)

	base := "http://127.0.0.1:" + orders
	call := func(method, path, key, body string) map[string]any {
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer alice-token")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var v map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
		require.Less(t, resp.StatusCode, 300, "%s %s: %v", method, path, v)
		return v
	}
	id := int64(call(http.MethodPost, "/v1/orders", "ws-1", `{"product_id":1,"quantity":1}`)["id"].(float64))
	call(http.MethodPost, fmt.Sprintf("/v1/orders/%d/pay", id), "ws-pay-1", "")
	// The callback goes to CALLBACK_URL, which the script derives from orders' port.
	status := ""
	for deadline := time.Now().Add(30 * time.Second); status != "PAID" && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		status, _ = call(http.MethodGet, fmt.Sprintf("/v1/orders/%d", id), "", "")["status"].(string)
	}
	require.Equal(t, "PAID", status, "the order paid through the script's stack")
	for _, p := range []string{payments, points} {
		resp, err := http.Get("http://127.0.0.1:" + p + "/readyz")
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, "port %s", p)
	}

	out, err = script("stop")
	require.NoError(t, err, out)
	for _, p := range []string{orders, payments, points} {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+p, time.Second); err == nil {
			c.Close()
			t.Errorf("port %s still listening after stop", p)
		}
	}
	out, err = script("status")
	require.Error(t, err, "status with nothing running: %s", out)
	assert.Contains(t, out, "orders           not answering")
}

// listeningOn returns the local addresses of the TCP sockets listening on port, from the kernel's
// tables (/proc/net/tcp and tcp6): "127.0.0.1", "::1", "0.0.0.0" or "::" (every interface), and so on.
func listeningOn(t *testing.T, port string) []string {
	t.Helper()
	var addrs []string
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		require.NoError(t, err)
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 4 || f[3] != "0A" { // 0A: LISTEN
				continue
			}
			hexIP, hexPort, _ := strings.Cut(f[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); err != nil || strconv.FormatUint(p, 10) != port {
				continue
			}
			raw, err := hex.DecodeString(hexIP)
			require.NoError(t, err)
			// The kernel prints each 32-bit word of the address in host byte order (little-endian here).
			for i := 0; i+4 <= len(raw); i += 4 {
				raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
			}
			addrs = append(addrs, net.IP(raw).String())
		}
	}
	return addrs
}

// start refuses ports another program holds: the ready checks would be answered by it while the
// script's own binaries died on their bind (a newcomer's second stack printed "ready"). Nothing is
// started, and no pids file is left for a stop to act on.
func TestWorkshopScriptRefusesATakenPort(t *testing.T) {
	t.Parallel()
	// The run's own database and names: without the check (its mutant) two of the three do start.
	env := testenv.New(t)
	env.Topology("")
	taken := takenPort(t)
	port := func() string { _, p, _ := net.SplitHostPort(testenv.FreeAddr(t)); return p }
	wsDir := t.TempDir()

	script := func(arg string) ([]byte, error) {
		cmd := workshopScript(t, arg)
		cmd.Env = append(os.Environ(), "BIN="+t.TempDir(), "WORKSHOP_DIR="+wsDir,
			"WORKSHOP_ORDERS_PORT="+taken, "WORKSHOP_PAYMENTS_PORT="+port(), "WORKSHOP_POINTS_PORT="+port(),
			"DATABASE_URL="+env.DatabaseURL, "REDIS_URL="+env.RedisURL, "AMQP_URL="+env.AMQPURL,
			"REDIS_KEY_PREFIX="+env.Prefix, "AMQP_NAME_PREFIX="+env.Prefix, "LOG_LEVEL=warn")
		return cmd.CombinedOutput()
	}
	t.Cleanup(func() { _, _ = script("stop") })
	out, err := script("start")
	require.Error(t, err, "%s", out)
	assert.Contains(t, string(out), "port "+taken+" (orders) is taken by another program")
	assert.NotContains(t, string(out), "ready")
	assert.NoFileExists(t, wsDir+"/pids")
}

// workshopScript is `bash scripts/workshop.sh arg` with the script's text read through
// mutants.ReadSource, so that under make mutants the mutated script runs: bash -c runs the text with $0
// set to the script's real path, which the script changes directory by.
func workshopScript(t *testing.T, arg string) *exec.Cmd {
	t.Helper()
	const path = "workshop.sh"
	text, err := mutants.ReadSource(path)
	require.NoError(t, err)
	return exec.Command("bash", "-c", string(text), path, arg)
}

// scripts/stack.sh (make demo, make bench-quick) refuses ports another program holds, before it builds
// or creates anything: that program would answer the ready checks for a binary that died on its bind,
// and the demo or the bench would run against it (a workshop walker's finding, 2026-12-07).
func TestStackRefusesATakenPort(t *testing.T) {
	t.Parallel()
	taken := takenPort(t)
	port := func() string { _, p, _ := net.SplitHostPort(testenv.FreeAddr(t)); return p }

	// stack.sh is sourced by demo.sh and bench.sh, which set kind; run from the repository's root.
	const path = "stack.sh"
	text, err := mutants.ReadSource(path)
	require.NoError(t, err)
	cmd := exec.Command("bash", "-c", "kind=demo\n"+string(text), path)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "BIN="+t.TempDir(), "LOG_LEVEL=warn",
		"DEMO_ORDERS_PORT="+taken, "DEMO_PAYMENTS_PORT="+port(), "DEMO_POINTS_PORT="+port())
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	assert.Equal(t, 2, exit.ExitCode(), "%s", out)
	assert.Contains(t, string(out), "port "+taken+" (orders) is taken by another program; give the stack others (DEMO_ORDERS_PORT)")
	assert.NotContains(t, string(out), "== building")
}

// takenPort is a loopback port another program holds for the test: an HTTP server that answers every
// request 200, as another stack's /readyz would.
func takenPort(t *testing.T) string {
	t.Helper()
	other := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = other.Serve(ln) }()
	t.Cleanup(func() { _ = other.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}
