package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/platform/config"
)

func TestDefaultsMatchDesign(t *testing.T) {
	c := config.DefaultOrders()
	assert.Equal(t, ":8080", c.HTTPAddr)
	assert.Equal(t, "postgres://postgres@127.0.0.1:5432/idemshop?sslmode=disable", c.Postgres.URL)
	assert.Equal(t, "redis://127.0.0.1:6379/0", c.Redis.URL)
	assert.Equal(t, "amqp://guest:guest@127.0.0.1:5672/", c.AMQPURL)
	assert.Equal(t, "http://127.0.0.1:8081", c.PaymentsURL)
	assert.Equal(t, "http://127.0.0.1:8080/v1/payments/callback", c.CallbackURL)
	assert.True(t, c.MigrateOnStart)
	assert.False(t, c.Lab)
	assert.Equal(t, 24*time.Hour, c.IdempotencyRetention)
	assert.Equal(t, 7*24*time.Hour, c.OutboxRetention)
	assert.Equal(t, 30*24*time.Hour, c.CallbackAuditRetention)
	assert.Equal(t, 5*time.Second, c.SweepInterval)
	assert.Equal(t, 30*time.Second, c.RefundRetryMin)
	assert.Equal(t, time.Hour, c.RefundRetryMax)
	assert.Equal(t, 10*time.Minute, c.ReconcileRefundDriftAfter)
	assert.Equal(t, 10*time.Minute, c.ReconcilePointsAfter)
	assert.EqualValues(t, 1<<20, c.BodyLimitBytes)
	assert.Equal(t, "text", c.Log.Format)
	assert.Equal(t, "info", c.Log.Level)
	require.NoError(t, c.Validate())
}

func TestLoadOrdersNamesTheBadVariable(t *testing.T) {
	cases := map[string]struct{ name, value, want string }{
		"unparsable duration":       {"IDEMPOTENCY_RETENTION", "soon", "IDEMPOTENCY_RETENTION"},
		"zero duration":             {"SWEEP_INTERVAL", "0s", "SWEEP_INTERVAL"},
		"zero outbox retention":     {"OUTBOX_RETENTION", "0s", "OUTBOX_RETENTION"},
		"negative audit retention":  {"CALLBACK_AUDIT_RETENTION", "-1h", "CALLBACK_AUDIT_RETENTION"},
		"zero one-shot timeout":     {"ONCE_TIMEOUT", "0s", "ONCE_TIMEOUT must be at least 1ms, got 0s"},
		"fence TTL past a Duration": {"REAPER_INTERVAL", "2562047h", "IDEMPOTENCY_RETENTION (24h0m0s) + REAPER_INTERVAL (2562047h0m0s) + 1h must be at most"},
		"not a bool":                {"ORDERS_LAB", "maybe", "ORDERS_LAB"},
		"relative URL":              {"PAYMENTS_URL", "payments", "PAYMENTS_URL"},
		"not an http URL":           {"PAYMENTS_URL", "ftp://payments", "PAYMENTS_URL is not an absolute http or https URL"},
		"callback not http":         {"CALLBACK_URL", "tcp://127.0.0.1:8080/cb", "CALLBACK_URL is not an absolute http or https URL"},
		// A newcomer's: orders started, and payments-mock refused every payment's notify_url.
		"callback port past 65535":      {"CALLBACK_URL", "http://127.0.0.1:99999/v1/payments/callback", "CALLBACK_URL has port 99999: want 1..65535"},
		"AMQP URL port 0":               {"AMQP_URL", "amqp://guest:guest@127.0.0.1:0/", "AMQP_URL has port 0: want 1..65535"},
		"negative body limit":           {"BODY_LIMIT_BYTES", "-1", "BODY_LIMIT_BYTES"},
		"zero refund retry":             {"REFUND_RETRY_MIN", "0s", "REFUND_RETRY_MIN"},
		"retry max under min":           {"REFUND_RETRY_MAX", "10s", "REFUND_RETRY_MAX (10s) must not be shorter than REFUND_RETRY_MIN (30s)"},
		"lookback within the grace":     {"RECONCILE_LOOKBACK", "1m", "RECONCILE_LOOKBACK (1m0s) must be longer than RECONCILE_GRACE (1m0s)"},
		"secret set but empty":          {"PAYMENT_WEBHOOK_SECRET", "", "PAYMENT_WEBHOOK_SECRET is set but empty"},
		"listen address without a port": {"HTTP_ADDR", "garbage", `HTTP_ADDR must be host:port or :port with a port number (e.g. :8080 or 127.0.0.1:8080), got "garbage"`},
		"listen port not a number":      {"HTTP_ADDR", ":80a", "HTTP_ADDR must be host:port"},
		"listen port out of range":      {"HTTP_ADDR", "127.0.0.1:65536", "HTTP_ADDR must be host:port"},
		// PostgreSQL takes these in whole milliseconds, and 0 there means no timeout at all.
		"lock timeout under 1 ms":         {"DB_LOCK_TIMEOUT", "500us", "DB_LOCK_TIMEOUT"},
		"statement timeout under 1 ms":    {"DB_STATEMENT_TIMEOUT", "999us", "DB_STATEMENT_TIMEOUT"},
		"lock timeout not whole ms":       {"DB_LOCK_TIMEOUT", "1500us", "DB_LOCK_TIMEOUT"},
		"statement timeout past int32 ms": {"DB_STATEMENT_TIMEOUT", "600h", "DB_STATEMENT_TIMEOUT"},
		"statement timeout within lock":   {"DB_STATEMENT_TIMEOUT", "2s", "DB_STATEMENT_TIMEOUT (2s) must be longer than DB_LOCK_TIMEOUT (2s)"},
		// A newcomer's (2026-12-06): each of these started orders, and failed later or said less.
		"mistyped pay fault":            {"PAY_FAULT", "crash-after-clam", `PAY_FAULT must be crash-after-claim, crash-after-rpc or crash-before-write, got "crash-after-clam"`},
		"pay lease under 1 ms":          {"PAY_LEASE", "500us", "PAY_LEASE must be >= 1ms"},
		"Redis timeout past a renewal":  {"REDIS_TIMEOUT", "7s", "REDIS_TIMEOUT (7s) must be shorter than PAY_LEASE less a third (6.666666667s)"},
		"reconcile interval under 1 ms": {"RECONCILE_INTERVAL", "500us", "RECONCILE_INTERVAL must be >= 1ms"},
		// A helper's (2026-12-06): each started, then busy-looped or answered nothing, without a word.
		"sweep interval of 1ns":        {"SWEEP_INTERVAL", "1ns", "SWEEP_INTERVAL must be at least 1ms, got 1ns"},
		"poll interval of 1ns":         {"OUTBOX_POLL_INTERVAL", "1ns", "OUTBOX_POLL_INTERVAL must be at least 1ms"},
		"header timeout of 1ns":        {"HTTP_READ_HEADER_TIMEOUT", "1ns", "HTTP_READ_HEADER_TIMEOUT must be at least 1ms"},
		"ready probe of 1ns":           {"READY_PROBE_TIMEOUT", "1ns", "READY_PROBE_TIMEOUT must be at least 1ms"},
		"startup attempt of 1ns":       {"STARTUP_ATTEMPT_TIMEOUT", "1ns", "STARTUP_ATTEMPT_TIMEOUT must be at least 1ms"},
		"idle in transaction too long": {"OUTBOX_CONFIRM_TIMEOUT", "596h31m20s", "DB_STATEMENT_TIMEOUT (10s) + OUTBOX_CONFIRM_TIMEOUT (596h31m20s) must be at most 596h31m23.647s"},
		"confirm timeout past int64":   {"OUTBOX_CONFIRM_TIMEOUT", "2000000h", "+ OUTBOX_CONFIRM_TIMEOUT (2000000h0m0s) must be at most"},
		"zero points check":            {"RECONCILE_POINTS_AFTER", "0s", "RECONCILE_POINTS_AFTER must be at least 1ms"},
		// A helper's (2026-12-06): the pay's answer came after the write deadline, an empty reply.
		"write timeout within the platform call": {"HTTP_WRITE_TIMEOUT", "3500ms", "PAYMENTS_TIMEOUT (3s) must be shorter than a request's work time, 2.625s: HTTP_WRITE_TIMEOUT (3.5s)"},
		// An overload tester's (2026-12-07): a body trickled within the read timeout got no answer.
		"write timeout within the read timeout": {"HTTP_WRITE_TIMEOUT", "15s", "HTTP_WRITE_TIMEOUT (15s) less the part kept to write the answer (1s) must be longer than HTTP_READ_TIMEOUT (15s)"},
		"form token TTL under 1 ms":             {"FORM_TOKEN_TTL", "100us", "FORM_TOKEN_TTL must be >= 1ms"},
		"in-flight lease under 1 ms":            {"FORM_TOKEN_INFLIGHT_LEASE", "100us", "FORM_TOKEN_INFLIGHT_LEASE must be >= 1ms"},
		"callback URL past 2048":                {"CALLBACK_URL", "http://127.0.0.1:8080/v1/payments/callback?pad=" + strings.Repeat("a", 2048), "CALLBACK_URL must be at most 2048 bytes"},
		"payments URL with a /":                 {"PAYMENTS_URL", "http://127.0.0.1:8081/", "PAYMENTS_URL must be a base URL without a query, a fragment or a trailing /"},
		"payments URL with a query":             {"PAYMENTS_URL", "http://127.0.0.1:8081?x=1", "PAYMENTS_URL must be a base URL"},
		"AMQP prefix past 255":                  {"AMQP_NAME_PREFIX", strings.Repeat("p", 240) + ":", "AMQP_NAME_PREFIX must be at most 234 bytes"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Setenv(tc.name, tc.value)
			_, err := config.LoadOrders()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// Each bad value is named once: PAYMENTS_URL went through httpURL twice (once more inside baseURL), and
// its port 0 was reported twice (a newcomer's finding, 2026-12-06).
func TestABadPaymentsURLIsNamedOnce(t *testing.T) {
	t.Setenv("PAYMENTS_URL", "http://127.0.0.1:0")
	_, err := config.LoadOrders()
	require.Error(t, err)
	assert.Equal(t, 1, strings.Count(err.Error(), "PAYMENTS_URL has port 0"), "%v", err)
}

// The other binaries that sign or check callbacks refuse an empty secret too, instead of the parser's
// default (the public demo secret).
func TestEmptyWebhookSecretIsRefusedEverywhere(t *testing.T) {
	t.Setenv("PAYMENT_WEBHOOK_SECRET", "")
	_, err := config.LoadPaymentsMock()
	require.ErrorContains(t, err, "PAYMENT_WEBHOOK_SECRET is set but empty")
	_, err = config.LoadLoadtest()
	require.ErrorContains(t, err, "PAYMENT_WEBHOOK_SECRET is set but empty")
}

// Every binary names HTTP_ADDR when it is not an address to listen on, before it opens anything.
func TestListenAddressIsCheckedEverywhere(t *testing.T) {
	t.Setenv("HTTP_ADDR", "8080")
	_, err := config.LoadPaymentsMock()
	require.ErrorContains(t, err, `HTTP_ADDR must be host:port or :port with a port number (e.g. :8080 or 127.0.0.1:8080), got "8080"`)
	_, err = config.LoadPointsConsumer()
	require.ErrorContains(t, err, `HTTP_ADDR must be host:port or :port with a port number (e.g. :8080 or 127.0.0.1:8080), got "8080"`)
	for _, ok := range []string{":0", "127.0.0.1:18080", "[::1]:8080", "localhost:8080"} {
		t.Setenv("HTTP_ADDR", ok)
		_, err = config.LoadOrders()
		require.NoError(t, err, ok)
	}
}

// loadtest checks the variables it shares with the services as they do, and names each one alone.
func TestLoadLoadtestNamesTheBadVariable(t *testing.T) {
	cases := map[string]struct{ name, value, want string }{
		"orders URL without a scheme":  {"ORDERS_URL", "127.0.0.1:8080", `ORDERS_URL is not an absolute http or https URL, got "127.0.0.1:8080"`},
		"payments URL not http":        {"PAYMENTS_URL", "ftp://127.0.0.1", "PAYMENTS_URL is not an absolute http or https URL"},
		"orders URL with a query":      {"ORDERS_URL", "http://127.0.0.1:8080?user=alice", "ORDERS_URL must be a base URL without a query"},
		"payments URL with a fragment": {"PAYMENTS_URL", "http://127.0.0.1:8081/#x", "PAYMENTS_URL must be a base URL without a query"},
		"lock timeout under 1 ms":      {"DB_LOCK_TIMEOUT", "500us", "DB_LOCK_TIMEOUT must be a whole number of milliseconds"},
		"zero Redis timeout":           {"REDIS_TIMEOUT", "0s", "REDIS_TIMEOUT must be at least 1ms, got 0s"},
		"zero quiet":                   {"LAB_QUIET", "0s", "LAB_QUIET must be at least 1ms, got 0s"},
		"zero HTTP timeout":            {"LAB_HTTP_TIMEOUT", "0s", "LAB_HTTP_TIMEOUT must be at least 1ms, got 0s"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Setenv(tc.name, tc.value)
			_, err := config.LoadLoadtest()
			require.ErrorContains(t, err, tc.want)
			assert.Equal(t, 1, strings.Count(err.Error(), "must")+strings.Count(err.Error(), "is not"), "one variable named: %v", err)
		})
	}
	_, err := config.LoadLoadtest()
	require.NoError(t, err, "the defaults")
}

// A variable set to "" would take its default in silence: REDIS_KEY_PREFIX= the shop's own prefix,
// HTTP_ADDR= the default port. Every binary names it instead.
func TestSetButEmptyIsRefusedEverywhere(t *testing.T) {
	loaders := map[string]func() error{
		"orders":          func() error { _, err := config.LoadOrders(); return err },
		"points-consumer": func() error { _, err := config.LoadPointsConsumer(); return err },
		"payments-mock":   func() error { _, err := config.LoadPaymentsMock(); return err },
		"loadtest":        func() error { _, err := config.LoadLoadtest(); return err },
	}
	for name, vars := range map[string][]string{
		"orders":          {"HTTP_ADDR", "DATABASE_URL", "REDIS_URL", "REDIS_KEY_PREFIX", "AMQP_URL", "PAYMENTS_URL", "CALLBACK_URL", "POINTS_METRICS_URL"},
		"points-consumer": {"HTTP_ADDR", "DATABASE_URL", "REDIS_URL", "REDIS_KEY_PREFIX", "AMQP_URL"},
		"payments-mock":   {"HTTP_ADDR", "CALLBACK_RETRY_SCHEDULE", "ID_TAG"},
		"loadtest":        {"ORDERS_URL", "PAYMENTS_URL", "DATABASE_URL", "REDIS_URL", "REDIS_KEY_PREFIX", "AMQP_URL"},
	} {
		for _, v := range vars {
			t.Run(name+" "+v, func(t *testing.T) {
				t.Setenv(v, "")
				require.ErrorContains(t, loaders[name](), v+" is set but empty")
			})
		}
	}
	// Empty is a value of its own for these: no prefix, no admin token, no fault.
	t.Setenv("AMQP_NAME_PREFIX", "")
	t.Setenv("ADMIN_TOKEN", "")
	t.Setenv("PAY_FAULT", "")
	for name, load := range loaders {
		require.NoError(t, load(), name)
	}
}

// prefixLoaders load the configuration of each binary that reads REDIS_KEY_PREFIX and AMQP_NAME_PREFIX.
var prefixLoaders = map[string]func() error{
	"orders":          func() error { _, err := config.LoadOrders(); return err },
	"points-consumer": func() error { _, err := config.LoadPointsConsumer(); return err },
	"loadtest":        func() error { _, err := config.LoadLoadtest(); return err },
}

// AMQP_NAME_PREFIX ends with a separator wherever it is read: idemshop would name the queue
// idemshoppoints.order-paid, which `orders teardown` then refuses to clean (a newcomer's finding). And
// no default name starts with it: under points. a run's names could not be told from the shop's, and
// teardown refused it too (the next newcomer's).
func TestAMQPNamePrefixEndsWithASeparatorEverywhere(t *testing.T) {
	for name, load := range prefixLoaders {
		for _, bad := range []string{"idemshop", "p", "run1:x"} {
			t.Setenv("AMQP_NAME_PREFIX", bad)
			require.ErrorContains(t, load(), `AMQP_NAME_PREFIX must be empty or end with one of ":.-_/" (e.g. "`+bad+`:"), got "`+bad+`"`, name)
		}
		for _, covering := range []string{"points.", "idemshop.", "idemshop.events.", "points.order-paid."} {
			t.Setenv("AMQP_NAME_PREFIX", covering)
			require.ErrorContains(t, load(), `AMQP_NAME_PREFIX "`+covering+`": the shop's own`, name)
		}
		for _, ok := range []string{"run1:", "run1.", "run1-", "run1_", "run1/", ":", "points:", "idemshop-"} {
			t.Setenv("AMQP_NAME_PREFIX", ok)
			require.NoError(t, load(), "%s %q", name, ok)
		}
	}
}

// A Redis prefix without a separator at its end: `orders teardown` under "ana" deleted "anabel:"'s keys
// too (a newcomer's finding, 2026-12-06).
func TestRedisKeyPrefixEndsWithASeparatorEverywhere(t *testing.T) {
	for name, load := range prefixLoaders {
		for _, bad := range []string{"ana", "idemshop", "run1:x"} {
			t.Setenv("REDIS_KEY_PREFIX", bad)
			require.ErrorContains(t, load(), `REDIS_KEY_PREFIX must end with one of ":.-_/" (e.g. "`+bad+`:"), got "`+bad+`"`, name)
		}
		for _, ok := range []string{"ana:", "run1.", "run1-", "run1_", "run1/", "idemshop:"} {
			t.Setenv("REDIS_KEY_PREFIX", ok)
			require.NoError(t, load(), "%s %q", name, ok)
		}
	}
}

// A token sent as a bearer token cannot hold a space: no client would send ' ', and every admin call
// would get 401.
func TestBearerTokensHaveNoSpaces(t *testing.T) {
	t.Setenv("ADMIN_TOKEN", " ")
	_, err := config.LoadPaymentsMock()
	require.ErrorContains(t, err, "ADMIN_TOKEN must not contain spaces or control characters")
	_, err = config.LoadLoadtest()
	require.ErrorContains(t, err, "ADMIN_TOKEN must not contain spaces or control characters")
	t.Setenv("PAYMENTS_ADMIN_TOKEN", "two words")
	_, err = config.LoadOrders()
	require.ErrorContains(t, err, "PAYMENTS_ADMIN_TOKEN must not contain spaces or control characters")
	t.Setenv("ADMIN_TOKEN", "s3cret-Token_1.~+/=")
	_, err = config.LoadPaymentsMock()
	require.NoError(t, err)
}

// SOAK_BIN= took its default, bin, in silence (a newcomer's, 2026-12-06).
func TestLoadSoakRefusesAnEmptyBin(t *testing.T) {
	t.Setenv("SOAK_BIN", "")
	_, err := config.LoadSoak()
	require.ErrorContains(t, err, "SOAK_BIN is set but empty")
}

// A config error quotes a bad URL without its password: PAYMENTS_URL's was printed to stderr, which
// ends up on the log platform (a helper's finding, 2026-12-07).
func TestABadURLIsQuotedWithoutItsPassword(t *testing.T) {
	for name, tc := range map[string]struct{ variable, value, want string }{
		"trailing /":     {"PAYMENTS_URL", "http://payuser:s3cr%2Ft@127.0.0.1:8081/", `"http://payuser:***@127.0.0.1:8081/"`},
		"not http":       {"PAYMENTS_URL", "ftp://payuser:s3cr%2Ft@127.0.0.1:8081", `"ftp://payuser:***@127.0.0.1:8081"`},
		"callback":       {"CALLBACK_URL", "gopher://cb:s3cr%2Ft@127.0.0.1/x", `"gopher://cb:***@127.0.0.1/x"`},
		"without scheme": {"POINTS_METRICS_URL", "muser:s3cr%2Ft@127.0.0.1", `"muser:***@127.0.0.1"`},
		"a / in it":      {"PAYMENTS_URL", "http://u:s3cr/t@127.0.0.1:1", `"http://u:***@127.0.0.1:1"`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(tc.variable, tc.value)
			_, err := config.LoadOrders()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), "s3cr")
		})
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://u:p@h:1/x":     "http://u:***@h:1/x",
		"http://u:p:q@r@h/x":   "http://u:***@h/x",
		"http://u:S3/CRET@h:1": "http://u:***@h:1",
		"http://u:S3?CRET@h:1": "http://u:***@h:1",
		"http://u:S3#CRET@h:1": "http://u:***@h:1",
		"http://h:8081/a@b":    "http://h:***@b", // an "@" in a path: more masked than needed
		"http://u@h/x":         "http://u@h/x",
		"u:p@h":                "u:***@h",
		"postgres://h/db":      "postgres://h/db",
		"":                     "",
	} {
		assert.Equal(t, want, config.RedactURL(in), in)
	}
}

// Every binary's server refuses a write timeout within its read timeout (the shared HTTP check).
func TestWriteTimeoutWithinReadTimeoutIsRefusedEverywhere(t *testing.T) {
	t.Setenv("HTTP_WRITE_TIMEOUT", "15001ms") // longer, but not by the part kept to write the answer
	want := "HTTP_WRITE_TIMEOUT (15.001s) less the part kept to write the answer (1s) must be longer than HTTP_READ_TIMEOUT (15s)"
	_, err := config.LoadOrders()
	require.ErrorContains(t, err, want)
	_, err = config.LoadPaymentsMock()
	require.ErrorContains(t, err, want)
	_, err = config.LoadPointsConsumer()
	require.ErrorContains(t, err, want)
	t.Setenv("HTTP_READ_TIMEOUT", "14s")
	_, err = config.LoadPaymentsMock()
	require.NoError(t, err, "15.001 s less 1 s outlasts 14 s")
}
