package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"idemshop/internal/platform/httpserver"
)

// checks collects validation errors; each names the variable an operator has to fix.
type checks struct{ errs []error }

func (c *checks) add(err error) { c.errs = append(c.errs, err) }

// positive checks an interval or a timeout: at least 1 ms. Shorter is a slip (1ns for 1s), never a
// wish: at 1ns the workers' loops took 60% of a CPU against PostgreSQL, and a 1ns header timeout
// answered no request, each started without a word (a helper's findings, 2026-12-06).
func (c *checks) positive(name string, d time.Duration) {
	if d < time.Millisecond {
		c.add(fmt.Errorf("%s must be at least 1ms, got %s", name, d))
	}
}

// pgMost is the longest timeout PostgreSQL takes, in whole milliseconds (an int4 setting).
const pgMost = 2147483647 * time.Millisecond

// pgMillis checks a duration sent to PostgreSQL as a timeout setting in whole milliseconds (lock_timeout,
// statement_timeout): 1 ms to 2147483647 ms, its range. Below 1 ms it would be sent as 0, which there
// means no timeout at all; past the range PostgreSQL refuses it only when the first connection is made.
func (c *checks) pgMillis(name string, d time.Duration) {
	if d < time.Millisecond || d > pgMost || d%time.Millisecond != 0 {
		c.add(fmt.Errorf("%s must be a whole number of milliseconds from 1ms to %s, got %s", name, pgMost, d))
	}
}

// redisMillis checks a duration sent to Redis as a key's time to live (SET ... PX): at least 1 ms, its
// resolution. go-redis sends anything shorter as 1 ms (and logs it), so POINTS_DONE_TTL=100us was
// accepted and meant ten times more than it said.
func (c *checks) redisMillis(name string, d time.Duration) {
	if d < time.Millisecond {
		c.add(fmt.Errorf("%s must be >= 1ms (the Redis TTL resolution), got %s", name, d))
	}
}

func (c *checks) notNegative(name string, d time.Duration) {
	if d < 0 {
		c.add(fmt.Errorf("%s must be >= 0, got %s", name, d))
	}
}

func (c *checks) atLeastOne(name string, n int64) {
	if n <= 0 {
		c.add(fmt.Errorf("%s must be > 0, got %d", name, n))
	}
}

func (c *checks) absoluteURL(name, raw string) {
	if u, err := url.Parse(raw); err != nil || u.Scheme == "" || u.Host == "" {
		c.add(fmt.Errorf("%s is not an absolute URL", name))
	} else {
		c.urlPort(name, u)
	}
}

// urlPort refuses a URL whose port is not 1..65535: url.Parse takes any digits (99999), and every
// request to it would fail later, far from the setting (CALLBACK_URL's: every payment refused).
func (c *checks) urlPort(name string, u *url.URL) {
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			c.add(fmt.Errorf("%s has port %s: want 1..65535", name, p))
		}
	}
}

// listenAddr checks an address the service listens on, as net.Listen takes it: host:port or :port,
// the port a number (0: any free port). Without it, "garbage" fails at the listen, after the
// connections were opened, in a message that does not name the variable.
func (c *checks) listenAddr(name, addr string) {
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		c.add(fmt.Errorf("%s must be host:port or :port with a port number (e.g. :8080 or 127.0.0.1:8080), got %q", name, addr))
	}
}

// bearerToken checks a token sent as "Authorization: Bearer <token>" (empty: none is sent). RFC 6750's
// token has no space or control character: ADMIN_TOKEN=' ' was accepted, and then no client could send
// it, so every admin call got 401.
func (c *checks) bearerToken(name, tok string) {
	if strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		c.add(fmt.Errorf("%s must not contain spaces or control characters (it is sent as a bearer token)", name))
	}
}

// httpURL is absoluteURL for a URL the service calls (or gives the platform to call) over HTTP: its
// scheme must be http or https, or the mistake shows only at the first call, after the service started.
func (c *checks) httpURL(name, raw string) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		c.add(fmt.Errorf("%s is not an absolute http or https URL, got %q", name, RedactURL(raw)))
		return
	}
	c.urlPort(name, u)
}

// baseURL is httpURL for a URL the service appends paths to (PAYMENTS_URL: "/v1/payments/..."): a
// query or fragment would end up before the path, and a trailing "/" would make "//v1/...", which the
// pay_url handed to the client carried.
func (c *checks) baseURL(name, raw string) {
	c.httpURL(name, raw)
	if u, err := url.Parse(raw); err == nil && (u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.HasSuffix(u.Path, "/")) {
		c.add(fmt.Errorf("%s must be a base URL without a query, a fragment or a trailing /, got %q", name, RedactURL(raw)))
	}
}

// RedactURL masks the password of a URL's userinfo ("user:***@host") for a message: a config error
// quoted PAYMENTS_URL with its password to stderr, which ends up on the log platform (a helper's
// finding, 2026-12-07). It works on the raw text, up to the last "@", because the URLs it is for are
// the ones that do not parse: a password with a "/", "?" or "#" that is not escaped ends the host
// early, and was printed whole (the verifier's finding, the same day). So an "@" in a path masks more
// than a password; text without an "@" comes back as it is.
func RedactURL(raw string) string {
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 {
		start = i + len("://")
	}
	at := strings.LastIndex(raw[start:], "@")
	if at < 0 {
		return raw
	}
	if colon := strings.Index(raw[start:start+at], ":"); colon >= 0 {
		return raw[:start+colon] + ":***" + raw[start+at:]
	}
	return raw
}

func (c *checks) err() error {
	if err := errors.Join(c.errs...); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// The shared parts check themselves, once, for every binary that embeds them.

func (h HTTP) check(c *checks) {
	c.positive("HTTP_READ_HEADER_TIMEOUT", h.ReadHeaderTimeout)
	c.positive("HTTP_READ_TIMEOUT", h.ReadTimeout)
	c.positive("HTTP_WRITE_TIMEOUT", h.WriteTimeout)
	if work := httpserver.WorkTime(h.WriteTimeout); h.ReadTimeout > 0 && h.WriteTimeout > 0 && work <= h.ReadTimeout {
		// Go's write deadline counts from the end of the request's headers, the body's read included: a
		// body the read timeout still allowed left no time to answer, and its client read EOF with no
		// status line (an overload tester's trickled body, 2026-12-07). The part kept to write the
		// answer must be left too (a verifier's 15001ms against 15s left 1 ms).
		c.add(fmt.Errorf("HTTP_WRITE_TIMEOUT (%s) less the part kept to write the answer (%s) must be longer than HTTP_READ_TIMEOUT (%s): the write deadline counts the body's read too",
			h.WriteTimeout, httpserver.AnswerReserve(h.WriteTimeout), h.ReadTimeout))
	}
	c.positive("HTTP_IDLE_TIMEOUT", h.IdleTimeout)
	c.positive("SHUTDOWN_TIMEOUT", h.ShutdownTimeout)
	c.atLeastOne("BODY_LIMIT_BYTES", h.BodyLimitBytes)
}

func (p Postgres) check(c *checks) {
	c.absoluteURL("DATABASE_URL", p.URL)
	c.pgMillis("DB_LOCK_TIMEOUT", p.LockTimeout)
	c.pgMillis("DB_STATEMENT_TIMEOUT", p.StatementTimeout)
	if p.StatementTimeout <= p.LockTimeout {
		// A lock wait would end as a statement timeout (a 503) before it could end as a lock timeout
		// (the 409 with Retry-After that a busy key or order answers).
		c.add(fmt.Errorf("DB_STATEMENT_TIMEOUT (%s) must be longer than DB_LOCK_TIMEOUT (%s)", p.StatementTimeout, p.LockTimeout))
	}
	c.atLeastOne("DB_MAX_CONNS", int64(p.MaxConns))
}

func (r Redis) check(c *checks) {
	c.absoluteURL("REDIS_URL", r.URL)
	c.positive("REDIS_TIMEOUT", r.Timeout)
	// As AMQP_NAME_PREFIX: without a separator at its end, a run's keys cannot be told from another
	// run's whose prefix starts with it, and `orders teardown` under "ana" deletes "anabel:"'s keys.
	if p := r.KeyPrefix; p != "" && !strings.ContainsAny(p[len(p)-1:], prefixSeparators) {
		c.add(fmt.Errorf("REDIS_KEY_PREFIX must end with one of %q (e.g. %q), got %q", prefixSeparators, p+":", p))
	}
}

// setButEmpty is an error naming each of names that is set to the empty string. The parser reads a
// variable set to "" as unset and gives it its default: PAYMENT_WEBHOOK_SECRET= would start a service
// on the public demo secret, which anyone can sign callbacks with, and REDIS_KEY_PREFIX= on the shop's
// own prefix, shared with every other run that made the same slip.
//
// The names are those whose default is never what an empty value could mean (an address, a URL, a
// prefix, a secret, an id tag; a retry schedule, where empty could mean "no retries" and would get
// seven). The variables where empty is a value of its own (AMQP_NAME_PREFIX, ADMIN_TOKEN,
// PAY_FAULT) stay out: scripts set them empty on purpose.
func setButEmpty(names ...string) error {
	var errs []error
	for _, n := range names {
		if v, ok := os.LookupEnv(n); ok && v == "" {
			errs = append(errs, fmt.Errorf("%s is set but empty: give it a value, or unset it for its default", n))
		}
	}
	return errors.Join(errs...)
}
