package soak

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"idemshop/internal/platform/freeport"
	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/platform/redisx"
)

// Shop settings for a fast soak: short sweeps, leases and timeouts, so that the shop's repair loops
// run many times within a minute. The reconciler compares an order again after 5 s (not 10 m), so a
// refund whose callbacks were all lost during a kill is found within the quiescence wait.
var ordersSettings = []string{
	"SWEEP_INTERVAL=500ms", "PAY_LEASE=2s", "PAYMENTS_TIMEOUT=1s",
	"RECONCILE_INTERVAL=1s", "RECONCILE_GRACE=2s", "RECONCILE_RECHECK=5s",
	"SHUTDOWN_TIMEOUT=5s", "DB_MAX_CONNS=10",
	"AMQP_RECONNECT_MAX=2s",
}

var pointsSettings = []string{
	"POINTS_LEASE_TTL=3s", "SHUTDOWN_TIMEOUT=5s", "DB_MAX_CONNS=5", "AMQP_RECONNECT_MAX=2s",
}

// The platform approves fast and retries callbacks on a compressed ladder (12 attempts within about
// 18 s) that outlasts any process fault of the soak (at most 2 s down plus the restart).
var mockSettings = []string{
	"AUTO_APPROVE_DELAY=50ms",
	"CALLBACK_RETRY_SCHEDULE=100ms,200ms,300ms,500ms,800ms,1s,1500ms,2s,2s,3s,3s",
	"CALLBACK_TIMEOUT=2s", "CREATE_TIMEOUT_DELAY=2s", "SHUTDOWN_TIMEOUT=5s",
}

// stack is the run's own shop: three supervised processes, a database and Redis/AMQP names of its
// own. down removes all of it.
type stack struct {
	opts     Options
	dbName   string
	dbURL    string // the run's database
	adminURL string // the server's postgres database, for CREATE/DROP
	prefix   string // Redis key prefix and AMQP name prefix
	logs     string
	ownLogs  bool // logs is a temporary directory the soak created

	mock, orders, points *proc
}

func newStack(opts Options) (*stack, error) {
	u, err := url.Parse(opts.PostgresURL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("DATABASE_URL is not a URL")
	}
	for _, name := range []string{"payments-mock", "orders", "points-consumer"} {
		if _, err := os.Stat(filepath.Join(opts.Bin, name)); err != nil {
			return nil, fmt.Errorf("binary %w (build them with `go build -o %s/ ./cmd/... ./loadtest`, or set SOAK_BIN)", err, opts.Bin)
		}
	}
	s := &stack{opts: opts, dbName: "idemshop_" + opts.RunID, prefix: opts.RunID + ":", logs: opts.Logs}
	u.Path = "/" + s.dbName
	s.dbURL = u.String()
	u.Path = "/postgres"
	s.adminURL = u.String()
	if s.logs == "" {
		if s.logs, err = os.MkdirTemp("", "idemshop-soak-"); err != nil {
			return nil, err
		}
		s.ownLogs = true
	} else if err := os.MkdirAll(s.logs, 0o755); err != nil {
		return nil, err
	}

	var addrs [3]string
	for i := range addrs {
		if addrs[i], err = freeport.Addr(); err != nil {
			return nil, err
		}
	}
	mockAddr, ordersAddr, pointsAddr := addrs[0], addrs[1], addrs[2]
	base := os.Environ()
	common := []string{
		"DATABASE_URL=" + s.dbURL, "REDIS_URL=" + opts.RedisURL, "AMQP_URL=" + opts.AMQPURL,
		"REDIS_KEY_PREFIX=" + s.prefix, "AMQP_NAME_PREFIX=" + s.prefix,
		"PAYMENT_WEBHOOK_SECRET=" + opts.Secret, "ORDERS_LAB=false", "PAY_FAULT=", "POINTS_FAULT=",
		"LOG_LEVEL=" + opts.ChildLogLevel, "LOG_FORMAT=text",
	}
	env := func(addr string, extra ...[]string) []string {
		out := append(append([]string{}, base...), common...)
		out = append(out, "HTTP_ADDR="+addr)
		for _, e := range extra {
			out = append(out, e...)
		}
		return out
	}
	chaosSeed := []string{"CHAOS_SEED=" + strconv.FormatUint(opts.Seed, 10), "ADMIN_TOKEN=" + opts.AdminToken}
	s.mock = &proc{name: "payments-mock", bin: filepath.Join(opts.Bin, "payments-mock"), addr: mockAddr,
		env: env(mockAddr, mockSettings, chaosSeed), logPath: filepath.Join(s.logs, "payments-mock.log")}
	s.orders = &proc{name: "orders", bin: filepath.Join(opts.Bin, "orders"), addr: ordersAddr,
		env: env(ordersAddr, ordersSettings, []string{
			"MIGRATE_ON_START=true", "PAYMENTS_URL=http://" + mockAddr,
			"CALLBACK_URL=http://" + ordersAddr + "/v1/payments/callback",
		}), logPath: filepath.Join(s.logs, "orders.log")}
	s.points = &proc{name: "points-consumer", bin: filepath.Join(opts.Bin, "points-consumer"), addr: pointsAddr,
		env: env(pointsAddr, pointsSettings), logPath: filepath.Join(s.logs, "points-consumer.log")}
	return s, nil
}

func (s *stack) procs() []*proc { return []*proc{s.mock, s.orders, s.points} }

func (s *stack) ordersURL() string   { return "http://" + s.orders.addr }
func (s *stack) paymentsURL() string { return "http://" + s.mock.addr }

// upPlatformAndOrders starts payments-mock, then orders (which creates and migrates the database).
func (s *stack) upPlatformAndOrders(ctx context.Context) error {
	if err := s.mock.start(ctx); err != nil {
		return err
	}
	return s.orders.start(ctx)
}

// down stops every process and removes the database, the broker objects and the Redis keys of the run.
// It is bounded and best effort; what it could not remove is returned.
func (s *stack) down() []error {
	for _, p := range []*proc{s.points, s.orders, s.mock} {
		p.stop()
	}
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A private instance goes away whole (privateInfra.down): nothing to drop or delete there.
	if !s.opts.private[svcPostgres] {
		if conn, err := pgx.Connect(ctx, s.adminURL); err != nil {
			errs = append(errs, fmt.Errorf("drop database %s: %w", s.dbName, err))
		} else {
			if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{s.dbName}.Sanitize()+" WITH (FORCE)"); err != nil {
				errs = append(errs, fmt.Errorf("drop database %s: %w", s.dbName, err))
			}
			_ = conn.Close(ctx)
		}
	}

	if !s.opts.private[svcRabbit] {
		if conn, err := rabbitmq.Dial(ctx, s.opts.AMQPURL); err != nil {
			errs = append(errs, fmt.Errorf("delete AMQP objects %s*: %w", s.prefix, err))
		} else {
			if err := rabbitmq.Delete(conn, rabbitmq.OrderPaidTopology().WithPrefix(s.prefix)); err != nil {
				errs = append(errs, err)
			}
			_ = conn.Close()
		}
	}

	if !s.opts.private[svcRedis] {
		if err := deleteRedisKeys(ctx, s.opts.RedisURL, s.prefix); err != nil {
			errs = append(errs, fmt.Errorf("delete Redis keys %s*: %w", s.prefix, err))
		}
	}
	return errs
}

// deleteRedisKeys deletes the run's keys (prefix*).
func deleteRedisKeys(ctx context.Context, redisURL, prefix string) error {
	rdb, err := redisx.Open(redisURL, 2*time.Second)
	if err != nil {
		return err
	}
	defer rdb.Close()
	return redisx.DeletePrefix(ctx, rdb, prefix)
}
