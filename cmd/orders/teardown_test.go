package main_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/testenv"
	"idemshop/internal/testenv/tcpproxy"
)

// `orders teardown` (what scripts/cleanup.sh runs at the end of make demo, bench-quick and soak)
// deletes the run's Redis keys, its topology and the extra names it is given under its prefix, and
// nothing outside the prefix; without explicit prefixes it refuses.
func TestTeardownRemovesOnlyTheRunsNames(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "idemshop/cmd/orders")
	env := testenv.New(t)
	ctx := context.Background()
	run := env.Prefix + "run:"
	for _, k := range []string{run + "idem:1", run + "points:dedup:2", env.Prefix + "other"} {
		require.NoError(t, env.Redis.Set(ctx, k, "x", time.Hour).Err())
	}
	top := env.Topology("run:") // each deleted at the end whatever happens
	lab := env.Topology("run:lab-s6-1:")
	conn, _ := declared(t, env, top, lab)

	refused := exec.Command(bin, "teardown")
	refused.Env = append(os.Environ(), "REDIS_KEY_PREFIX=", "AMQP_NAME_PREFIX="+run, "REDIS_URL="+env.RedisURL)
	out, err := refused.CombinedOutput()
	require.Error(t, err, "an empty Redis prefix would mean the shop's default one")
	assert.Contains(t, string(out), "REDIS_KEY_PREFIX is set but empty")
	unset := exec.Command(bin, "teardown")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDIS_KEY_PREFIX=") {
			unset.Env = append(unset.Env, kv)
		}
	}
	unset.Env = append(unset.Env, "AMQP_NAME_PREFIX="+run, "REDIS_URL="+env.RedisURL)
	out, err = unset.CombinedOutput()
	require.Error(t, err, "no Redis prefix means the shop's default one")
	assert.Contains(t, string(out), "teardown needs")

	dead := testenv.FreeAddr(t)
	nowhere := []string{"REDIS_URL=redis://" + dead + "/0", "AMQP_URL=amqp://guest:guest@" + dead + "/"}
	// Each of these is refused before anything is deleted: a flag (`teardown --help` once deleted a
	// live stack's queue with its messages), a name outside the prefix, the shop's default prefix.
	for _, c := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"--help"}, []string{"REDIS_KEY_PREFIX=" + run, "AMQP_NAME_PREFIX=" + run}, `not flags: "--help"`},
		{[]string{lab.Queue, "points.order-paid"}, []string{"REDIS_KEY_PREFIX=" + run, "AMQP_NAME_PREFIX=" + run}, `"points.order-paid" is not under AMQP_NAME_PREFIX`},
		{nil, []string{"REDIS_KEY_PREFIX=idemshop:", "AMQP_NAME_PREFIX=" + run}, `REDIS_KEY_PREFIX "idemshop:": it is the shop's default prefix`},
		// Prefixes that cover the shop's own names: a part of the default Redis prefix, a namespace
		// inside it, and AMQP prefixes that the default queue and exchange names start with. These
		// point at addresses where nothing listens, so that a teardown without the check (the mutant)
		// fails on connecting instead of deleting the shared servers' default names.
		// Redis prefixes that cover it do not load (they end without a separator: config's own test).
		{nil, append(nowhere, "REDIS_KEY_PREFIX=idemshop", "AMQP_NAME_PREFIX="+run), `REDIS_KEY_PREFIX must end with one of ":.-_/" (e.g. "idemshop:"), got "idemshop"`},
		{nil, append(nowhere, "REDIS_KEY_PREFIX=i", "AMQP_NAME_PREFIX="+run), `REDIS_KEY_PREFIX must end with one of ":.-_/" (e.g. "i:"), got "i"`},
		{nil, append(nowhere, "REDIS_KEY_PREFIX=idemshop:points:", "AMQP_NAME_PREFIX="+run), `REDIS_KEY_PREFIX "idemshop:points:": it lies inside the shop's own prefix "idemshop:"`},
		{nil, append(nowhere, "REDIS_KEY_PREFIX=idemshop:ana:", "AMQP_NAME_PREFIX="+run), `REDIS_KEY_PREFIX "idemshop:ana:": it lies inside the shop's own prefix "idemshop:"`},
		// AMQP prefixes that cover the shop's names do not load (the configuration refuses them for
		// every binary: config's own test), so teardown never starts under them.
		{nil, append(nowhere, "REDIS_KEY_PREFIX="+run, "AMQP_NAME_PREFIX=p"), `AMQP_NAME_PREFIX must be empty or end with one of`},
		{nil, append(nowhere, "REDIS_KEY_PREFIX="+run, "AMQP_NAME_PREFIX=points."), `AMQP_NAME_PREFIX "points.": the shop's own "points.order-paid" is under it`},
		{[]string{"idemshop.events"}, append(nowhere, "REDIS_KEY_PREFIX="+run, "AMQP_NAME_PREFIX=idemshop."), `AMQP_NAME_PREFIX "idemshop.": the shop's own "idemshop.events" is under it`},
	} {
		cmd := exec.Command(bin, append([]string{"teardown"}, c.args...)...)
		cmd.Env = append(append(os.Environ(), "REDIS_URL="+env.RedisURL, "AMQP_URL="+env.AMQPURL), c.env...)
		out, err := cmd.CombinedOutput()
		require.Error(t, err, "%v: %s", c.args, out)
		assert.Contains(t, string(out), c.want)
		keys, err := env.Redis.Keys(ctx, env.Prefix+"*").Result()
		require.NoError(t, err)
		assert.Len(t, keys, 3, "%v: no key deleted", c.args)
		ch, err := conn.Channel()
		require.NoError(t, err)
		_, err = ch.QueueDeclarePassive(lab.Queue, true, false, false, false, nil)
		assert.NoError(t, err, "%v: the queue is still there", c.args)
	}

	out, err = teardownCmd(ctx, bin, env, run, []string{lab.Queue, lab.DeadLetterQueue, lab.Exchange, lab.DeadLetterExchange}).CombinedOutput()
	require.NoError(t, err, string(out))

	left, err := env.Redis.Keys(ctx, env.Prefix+"*").Result()
	require.NoError(t, err)
	assert.Equal(t, []string{env.Prefix + "other"}, left)
	for _, q := range []string{top.Queue, top.DeadLetterQueue, lab.Queue, lab.DeadLetterQueue} {
		ch, err := conn.Channel()
		require.NoError(t, err)
		_, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
		assert.Error(t, err, "queue %s is gone", q)
	}
	for _, x := range []string{top.Exchange, top.DeadLetterExchange, lab.Exchange, lab.DeadLetterExchange} {
		ch, err := conn.Channel()
		require.NoError(t, err)
		assert.Error(t, ch.ExchangeDeclarePassive(x, amqp.ExchangeTopic, true, false, false, false, nil),
			"exchange %s is gone", x)
	}
}

// A name teardown cannot delete (a queue another connection holds exclusively) makes it fail, naming
// it, after it has deleted everything else: it once logged "teardown done" and exited 0.
func TestTeardownSaysWhatItCouldNotDelete(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "idemshop/cmd/orders")
	env := testenv.New(t)
	run := env.Prefix + "run:"
	top := env.Topology("run:")
	conn, ch := declared(t, env, top)
	excl := run + "exclusive"
	_, err := ch.QueueDeclare(excl, false, true, true, false, nil) // gone with this connection
	require.NoError(t, err)

	out, err := teardownCmd(context.Background(), bin, env, run, []string{excl}).CombinedOutput()
	require.Error(t, err, string(out))
	assert.Contains(t, string(out), "delete queue "+excl)
	assert.NotContains(t, string(out), "teardown done")
	for _, q := range []string{top.Queue, top.DeadLetterQueue} {
		ch, err := conn.Channel()
		require.NoError(t, err)
		_, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
		assert.Error(t, err, "queue %s deleted all the same", q)
	}
}

// While a queue of the run has a consumer, its stack is still running, and teardown refuses before it
// deletes anything: a running points-consumer declared the topology again at once, and teardown had
// said "done" (a newcomer's, 2026-12-06). Once the consumer is gone, it deletes.
func TestTeardownRefusesWhileTheStackRuns(t *testing.T) {
	t.Parallel()
	bin, env, run := runWithAKey(t)
	ctx := context.Background()
	top := env.Topology("run:")
	conn, ch := declared(t, env, top)
	_, err := ch.Consume(top.Queue, "running-stack", false, false, false, false, nil)
	require.NoError(t, err)

	teardown := func() ([]byte, error) { return teardownCmd(ctx, bin, env, run, nil).CombinedOutput() }
	queueThere := func() bool {
		ch, err := conn.Channel()
		require.NoError(t, err)
		defer ch.Close()
		_, err = ch.QueueDeclarePassive(top.Queue, true, false, false, false, nil)
		return err == nil
	}
	out, err := teardown()
	require.Error(t, err, string(out))
	assert.Contains(t, string(out), "queue "+top.Queue+" has 1 consumer(s): stop the stack")
	assert.Equal(t, int64(1), env.Redis.Exists(ctx, run+"idem:1").Val(), "no key deleted")
	assert.True(t, queueThere(), "the queue is still there")

	require.NoError(t, ch.Cancel("running-stack", false))
	out, err = teardown()
	require.NoError(t, err, string(out))
	assert.Zero(t, env.Redis.Exists(ctx, run+"idem:1").Val())
	assert.False(t, queueThere(), "deleted once the consumer was gone")
}

// A broker that accepts and never answers gets a budget of its own: it took the whole 30 s, and the
// Redis keys were left behind (a helper's finding, 2026-12-06). The keys go; teardown exits 1, naming
// the broker.
func TestTeardownDeletesTheKeysWhenTheBrokerDoesNotAnswer(t *testing.T) {
	t.Parallel()
	bin, env, run := runWithAKey(t)
	ctx := context.Background()

	limit, cancel := context.WithTimeout(ctx, 12*time.Second)
	defer cancel()
	out, err := teardownCmd(limit, bin, env, run, nil, "AMQP_URL=amqp://guest:guest@"+testenv.SilentListener(t)+"/").CombinedOutput()
	require.NoError(t, limit.Err(), "teardown still waiting on the broker after 12 s: %s", out)
	require.Error(t, err, string(out))
	assert.Contains(t, string(out), "delete AMQP objects "+run)
	assert.Zero(t, env.Redis.Exists(ctx, run+"idem:1").Val(), "the Redis keys deleted all the same")
}

// A broker that completes the handshake and then says nothing: the consumer check waited on it three
// heartbeats (30 s), past the Redis budget, and the keys were left (a helper's finding, 2026-12-06).
// The check has the dial's 5 s; the keys go, and teardown exits 1 naming what it could not delete.
func TestTeardownDeletesTheKeysWhenTheBrokerFallsSilentAfterItsHandshake(t *testing.T) {
	t.Parallel()
	bin, env, run := runWithAKey(t)
	ctx := context.Background()
	proxy, amqpURL := tcpproxy.ForURL(t, env.AMQPURL)
	proxy.StallAfterAMQPOpen()

	limit, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	out, err := teardownCmd(limit, bin, env, run, nil, "AMQP_URL="+amqpURL).CombinedOutput()
	require.NoError(t, limit.Err(), "teardown still waiting on the broker after 15 s: %s", out)
	require.Error(t, err, string(out))
	assert.Contains(t, string(out), "not everything was deleted")
	assert.Zero(t, env.Redis.Exists(ctx, run+"idem:1").Val(), "the Redis keys deleted all the same")
}

// teardownCmd is `orders teardown names...` under the run's prefixes, against env's Redis and RabbitMQ
// unless extra says otherwise (later entries win).
func teardownCmd(ctx context.Context, bin string, env *testenv.Env, run string, names []string, extra ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, append([]string{"teardown"}, names...)...)
	cmd.Env = append(append(os.Environ(), "REDIS_KEY_PREFIX="+run, "AMQP_NAME_PREFIX="+run,
		"REDIS_URL="+env.RedisURL, "AMQP_URL="+env.AMQPURL), extra...)
	return cmd
}

// runWithAKey builds orders and gives the test a run prefix under env's own, with one Redis key under
// it (run + "idem:1") for teardown to delete or keep.
func runWithAKey(t *testing.T) (bin string, env *testenv.Env, run string) {
	t.Helper()
	bin = testenv.Build(t, "idemshop/cmd/orders")
	env = testenv.New(t)
	run = env.Prefix + "run:"
	require.NoError(t, env.Redis.Set(context.Background(), run+"idem:1", "x", time.Hour).Err())
	return bin, env, run
}

// declared declares each topology on a connection of the test's, closed at its end, and returns the
// connection and the channel it declared on.
func declared(t *testing.T, env *testenv.Env, tops ...rabbitmq.Topology) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	conn, err := amqp.Dial(env.AMQPURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	for _, top := range tops {
		require.NoError(t, rabbitmq.Declare(ch, top))
	}
	return conn, ch
}
