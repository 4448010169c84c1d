// Package testenv gives each test real, isolated backing services: its own PostgreSQL database cloned
// from a migrated template, its own Redis key prefix and its own RabbitMQ queue names.
//
// It uses the local services (TEST_DATABASE_URL, TEST_REDIS_URL, TEST_AMQP_URL, defaulting to the usual
// loopback ports). When one does not answer and a Docker engine is reachable, it starts that service with
// testcontainers-go. When neither works, the test fails loudly; under `go test -short` it is skipped.
package testenv

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Services are the admin addresses of the backing services for this test binary.
type Services struct {
	// PostgresURL points at the server's "postgres" maintenance database, as a superuser.
	PostgresURL string
	RedisURL    string
	AMQPURL     string
}

var (
	servicesOnce sync.Once
	services     Services
	servicesErr  error
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Find returns the services, starting containers for missing ones on the first call. The result is
// shared by all tests of the binary; containers (if any) are reaped by testcontainers' Ryuk at exit.
func Find(t testing.TB) Services {
	t.Helper()
	servicesOnce.Do(func() { services, servicesErr = find() })
	if servicesErr != nil {
		if testing.Short() {
			t.Skipf("testenv: backing services unavailable, skipped under -short: %v", servicesErr)
		}
		t.Fatalf("testenv: backing services unavailable (run the local PostgreSQL, Redis and RabbitMQ, "+
			"or a Docker engine for testcontainers): %v", servicesErr)
	}
	return services
}

func find() (Services, error) {
	s := Services{
		PostgresURL: envOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"),
		RedisURL:    envOr("TEST_REDIS_URL", "redis://127.0.0.1:6379/0"),
		AMQPURL:     envOr("TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"),
	}
	missing := map[string]bool{}
	for name, raw := range map[string]string{"postgres": s.PostgresURL, "redis": s.RedisURL, "rabbitmq": s.AMQPURL} {
		if err := dialURL(raw); err != nil {
			missing[name] = true
		}
	}
	if len(missing) == 0 {
		return s, nil
	}
	if err := dockerHealthy(); err != nil {
		return s, fmt.Errorf("not answering: %v; and no Docker engine: %w", keys(missing), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var err error
	if missing["postgres"] {
		if s.PostgresURL, err = startPostgres(ctx); err != nil {
			return s, err
		}
	}
	if missing["redis"] {
		if s.RedisURL, err = startRedis(ctx); err != nil {
			return s, err
		}
	}
	if missing["rabbitmq"] {
		if s.AMQPURL, err = startRabbitMQ(ctx); err != nil {
			return s, err
		}
	}
	return s, nil
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// dialURL checks that something accepts TCP connections at the URL's host:port.
func dialURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	c, err := net.DialTimeout("tcp", u.Host, time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

func dockerHealthy() (err error) {
	defer func() {
		// testcontainers panics in some set-ups without a Docker socket; that is "no Docker" too.
		if r := recover(); r != nil {
			err = fmt.Errorf("docker provider panicked: %v", r)
		}
	}()
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return p.Health(ctx)
}

// The images testcontainers starts: exactly the ones docker-compose.yml runs (deploy/compose_test.go
// checks), so that a test passing on containers passes against the demo stack too.
const (
	PostgresImage = "postgres:16.10"
	RedisImage    = "redis:7.4.2"
	RabbitMQImage = "rabbitmq:3.13.7-management"
)

func startPostgres(ctx context.Context) (string, error) {
	c, err := tcpostgres.Run(ctx, PostgresImage,
		tcpostgres.WithDatabase("postgres"), tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"), tcpostgres.BasicWaitStrategies())
	if err != nil {
		return "", fmt.Errorf("start postgres container: %w", err)
	}
	return c.ConnectionString(ctx, "sslmode=disable")
}

func startRedis(ctx context.Context) (string, error) {
	c, err := tcredis.Run(ctx, RedisImage)
	if err != nil {
		return "", fmt.Errorf("start redis container: %w", err)
	}
	return c.ConnectionString(ctx)
}

// startRabbitMQ uses a generic container: the rabbitmq module served for this testcontainers version
// does not build against it.
func startRabbitMQ(ctx context.Context) (string, error) {
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:        RabbitMQImage,
			ExposedPorts: []string{"5672/tcp"},
			WaitingFor:   wait.ForListeningPort("5672/tcp").WithStartupTimeout(2 * time.Minute),
		},
		Started: true,
	})
	if err != nil {
		return "", fmt.Errorf("start rabbitmq container: %w", err)
	}
	ep, err := c.PortEndpoint(ctx, "5672/tcp", "")
	if err != nil {
		return "", fmt.Errorf("rabbitmq container endpoint: %w", err)
	}
	return "amqp://guest:guest@" + ep + "/", nil
}
