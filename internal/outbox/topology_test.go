package outbox_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/outbox"
	"idemshop/internal/testenv"
	"idemshop/internal/testenv/tcpproxy"
)

// A DLX and DLQ deleted between two of the relay's sessions: its reconnect declared them again without
// a word, and points-consumer's periodic check then found nothing missing, so the dead letters the
// broker dropped meanwhile were never reported (a helper's finding, 2026-12-07). Every session after
// the first looks the names up before it declares them; the first declares a new broker's topology
// without an alert.
func TestTheRelayReportsATopologyDeletedBetweenTwoSessions(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	top := topology(t, env) // not declared yet: the relay's first session creates all of it
	proxy, viaProxy := tcpproxy.ForURL(t, env.AMQPURL)
	logs := &testenv.Output{}
	r, err := outbox.NewRelay(env.DB, relayConfig(viaProxy, top), slog.New(slog.NewTextHandler(logs, nil)), prometheus.NewRegistry())
	require.NoError(t, err)
	runInBackground(t, r.Run)
	insertPaid(t, env.DB, 1, 1)
	waitFor(t, 10*time.Second, func() bool { return pending(t, env.DB) == 0 }, "published on the first session")
	assert.NotContains(t, logs.String(), "topology_missing", "the first session's declare is no alert")

	env.DeleteWhileCut(proxy, top.DeadLetterQueue, top.DeadLetterExchange)
	insertPaid(t, env.DB, 2, 2)
	waitFor(t, 10*time.Second, func() bool { return pending(t, env.DB) == 0 }, "published on the next session")
	assert.Equal(t, 1, strings.Count(logs.String(), "alert=topology_missing"), "%s", logs.String())
	assert.Contains(t, logs.String(), top.DeadLetterQueue)
	assert.Contains(t, logs.String(), top.DeadLetterExchange)
	assert.Empty(t, env.Missing(top), "declared again")
}
