package deploy_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	gormpg "gorm.io/driver/postgres"
	"gorm.io/gorm"

	"idemshop/internal/ordersapp"
	"idemshop/internal/paymock"
	"idemshop/internal/platform/config"
	"idemshop/internal/platform/httpserver"
	"idemshop/internal/platform/rabbitmq"
	"idemshop/internal/points"
)

const (
	dashboardFile          = "grafana/dashboards/idemshop.json"
	dashboardDatasourceUID = "prometheus" // provisioned in grafana/provisioning/datasources
)

// dashboard is the part of Grafana's dashboard JSON the checks read. Rows may nest panels.
type dashboard struct {
	UID    string  `json:"uid"`
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	Targets    []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	var d dashboard
	require.NoError(t, dec.Decode(&d), "the dashboard is not valid JSON")
	_, err = dec.Token()
	require.ErrorIs(t, err, io.EOF, "trailing data after the dashboard object")
	return d
}

func flatten(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, flatten(p.Panels)...)
	}
	return out
}

// query is one PromQL expression of the dashboard, with where it comes from.
type query struct{ where, expr string }

func dashboardQueries(t *testing.T, d dashboard) []query {
	t.Helper()
	var qs []query
	ids := map[int]bool{}
	for _, p := range flatten(d.Panels) {
		assert.False(t, ids[p.ID], "panel id %d is used twice", p.ID)
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q queries nothing", p.Title)
		for _, tg := range p.Targets {
			where := p.Title + "/" + tg.RefID
			ds := tg.Datasource
			if ds == nil {
				ds = p.Datasource
			}
			if assert.NotNil(t, ds, "%s: no datasource", where) {
				assert.Equal(t, datasource{Type: "prometheus", UID: dashboardDatasourceUID}, *ds, where)
			}
			require.NotEmpty(t, strings.TrimSpace(tg.Expr), "%s: empty expression", where)
			qs = append(qs, query{where: where, expr: tg.Expr})
		}
	}
	return qs
}

func TestDashboardParses(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	assert.Equal(t, "idemshop", d.UID, "docs/docker.md links /d/idemshop")
	assert.NotEmpty(t, d.Title)
	assert.NotEmpty(t, dashboardQueries(t, d))
}

// What issue 9 asks the dashboard to show, and the metric that shows it.
var mustShow = map[string]string{
	"callbacks received vs applied":   "idemshop_payments_callbacks_total",
	"replays, conflicts, mismatches":  "idemshop_idempotency_requests_total",
	"sweeper repairs":                 "idemshop_sweeper_repairs_total",
	"fence rejections":                "idemshop_idempotency_fence_rejections_total",
	"outbox lag":                      "idemshop_outbox_publish_lag_seconds_bucket",
	"consumer outcomes":               "idemshop_points_messages_total",
	"callbacks the platform sent out": "idemshop_paymock_callbacks_sent_total",
}

// metricName finds metric names in PromQL. Every series the dashboard reads is ours (idemshop_), so
// the prefix tells a metric from a function, a label or a keyword without a PromQL parser.
var metricName = regexp.MustCompile(`\bidemshop_[a-zA-Z0-9_]+`)

// selector finds a metric with a label selector: name{matchers}.
var selector = regexp.MustCompile(`\b(idemshop_[a-zA-Z0-9_]+)\{([^}]*)\}`)

// matcher is one label matcher: name op "value".
var matcher = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"\s*$`)

func TestDashboardQueriesRegisteredMetrics(t *testing.T) {
	t.Parallel()
	regs := processRegistries(t)
	queries := dashboardQueries(t, loadDashboard(t))

	var all strings.Builder
	for _, q := range queries {
		all.WriteString(q.expr + "\n")
		names := metricName.FindAllString(q.expr, -1)
		assert.NotEmpty(t, names, "%s: %q reads no idemshop metric", q.where, q.expr)
		for _, name := range names {
			if _, ok := registeredIn(t, regs, name); !ok {
				t.Errorf("%s: %s is not registered by orders, payments-mock or points-consumer", q.where, name)
			} else if !strings.HasSuffix(name, "_bucket") && !exported(t, regs, name) {
				// A histogram's series appear with its first observation, per label set; a counter or a
				// gauge is pre-created, so that its panel shows a zero, not "no data".
				t.Errorf("%s: %s exports no series until its first event; pre-create its label values", q.where, name)
			}
		}
		for _, m := range selector.FindAllStringSubmatch(q.expr, -1) {
			checkMatchers(t, regs, q.where, m[1], m[2])
		}
	}
	for what, name := range mustShow {
		assert.Contains(t, all.String(), name, "the dashboard must show %s", what)
	}
}

// checkMatchers checks the label matchers of one selector. The counters and gauges the dashboard reads
// export their series from the start (TestDashboardQueriesRegisteredMetrics), so an equality matcher
// must name an existing label value: `outcome="aplied"` would draw a flat line forever.
func checkMatchers(t *testing.T, regs map[string]*prometheus.Registry, where, name, matchers string) {
	t.Helper()
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && registeredAnywhere(t, regs, base) {
			name = base // a histogram's series: its labels are the histogram's
		}
	}
	families := map[string]bool{}
	values := map[string]map[string]bool{} // label → values exported
	for _, reg := range regs {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				families[name] = true
				for _, lp := range m.GetLabel() {
					if values[lp.GetName()] == nil {
						values[lp.GetName()] = map[string]bool{}
					}
					values[lp.GetName()][lp.GetValue()] = true
				}
			}
		}
	}
	for part := range strings.SplitSeq(matchers, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		m := matcher.FindStringSubmatch(part)
		if !assert.NotNil(t, m, "%s: cannot read the matcher %q", where, part) || !families[name] {
			continue // a histogram nobody observed yet (its labels cannot be checked this way)
		}
		label, op, value := m[1], m[2], m[3]
		if !assert.Contains(t, values, label, "%s: %s has no label %q", where, name, label) {
			continue
		}
		if op == "=" {
			assert.True(t, values[label][value], "%s: %s{%s=%q}: no such value (have %v)", where, name, label, value, values[label])
		}
	}
}

// exported reports whether some registry exports at least one series of name right now.
func exported(t *testing.T, regs map[string]*prometheus.Registry, name string) bool {
	t.Helper()
	for _, reg := range regs {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == name && len(mf.GetMetric()) > 0 {
				return true
			}
		}
	}
	return false
}

// registeredAnywhere reports whether some process registers exactly name.
func registeredAnywhere(t *testing.T, regs map[string]*prometheus.Registry, name string) bool {
	t.Helper()
	for _, reg := range regs {
		if registered(t, reg, name) {
			return true
		}
	}
	return false
}

// registeredIn reports which process registers name. A histogram is queried through its _bucket,
// _sum and _count series, so those resolve to the histogram's own name.
func registeredIn(t *testing.T, regs map[string]*prometheus.Registry, name string) (string, bool) {
	t.Helper()
	candidates := []string{name}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			candidates = append(candidates, base)
		}
	}
	for process, reg := range regs {
		for _, c := range candidates {
			if registered(t, reg, c) {
				return process, true
			}
		}
	}
	return "", false
}

// registered reports whether reg holds a collector that describes the metric name. A Registry does not
// list its descriptors, and Gather leaves out a vector until it has a child, so ask the registry
// itself: registering a probe under the same fully-qualified name fails exactly when the name is taken
// (with other labels or help, or as a duplicate descriptor).
func registered(t *testing.T, reg *prometheus.Registry, name string) bool {
	t.Helper()
	probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "deploy_test probe for " + name})
	err := reg.Register(probe)
	if err == nil {
		reg.Unregister(probe)
		return false
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) || strings.Contains(err.Error(), "same fully-qualified name") {
		return true
	}
	t.Fatalf("probe %s: unexpected registry error: %v", name, err)
	return false
}

// processRegistries builds each scraped process's registry the way its cmd/ main does: the Go and
// process collectors, then the application wired on it. Nothing connects: the database handle and the
// Redis client are lazy, and the constructors open nothing.
func processRegistries(t *testing.T) map[string]*prometheus.Registry {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	db := lazyDB(t)
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	newRegistry := func() *prometheus.Registry {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		return reg
	}

	orders := newRegistry() // cmd/orders
	_, err := ordersapp.New(ordersapp.Deps{Config: config.DefaultOrders(), Logger: logger, DB: db, Redis: rdb, Registry: orders})
	require.NoError(t, err)

	payments := newRegistry() // cmd/payments-mock
	pm := config.DefaultPaymentsMock()
	platform, err := paymock.New(paymock.Config{
		Secret: []byte(pm.PaymentWebhookSecret), AutoApproveDelay: pm.AutoApproveDelay,
		RetrySchedule: pm.CallbackRetrySchedule, CallbackTimeout: pm.CallbackTimeout,
		CreateTimeoutDelay: pm.CreateTimeoutDelay, DeliveryLogLimit: pm.DeliveryLogLimit,
		Chaos: paymock.Chaos{Duplicates: pm.ChaosDuplicates, Parallel: pm.ChaosParallel, Seed: 1},
	}, logger, payments)
	require.NoError(t, err)
	t.Cleanup(func() { _ = platform.Close(context.Background()) })
	httpserver.New(logger, payments, pm.BodyLimitBytes)

	consumer := newRegistry() // cmd/points-consumer
	pc := config.DefaultPointsConsumer()
	_, err = points.NewConsumer(db, rdb, points.ConsumerConfig{
		AMQPURL: pc.AMQPURL, Topology: rabbitmq.OrderPaidTopology().WithPrefix(pc.NamePrefix),
		Prefetch: pc.Prefetch, BatchSize: pc.BatchSize, BatchWait: pc.BatchWait, KeyPrefix: pc.Redis.KeyPrefix,
		LeaseTTL: pc.LeaseTTL, DoneTTL: pc.DoneTTL, LeasePoll: pc.LeasePoll,
		ReconnectMin: pc.Reconnect.Min, ReconnectMax: pc.Reconnect.Max,
	}, logger, consumer)
	require.NoError(t, err)
	httpserver.New(logger, consumer, pc.BodyLimitBytes)

	return map[string]*prometheus.Registry{"orders": orders, "payments-mock": payments, "points-consumer": consumer}
}

// lazyDB is a GORM handle on a database that is never dialled: nothing here runs a query.
func lazyDB(t *testing.T) *gorm.DB {
	t.Helper()
	pcfg, err := pgx.ParseConfig("postgres://nobody@127.0.0.1:1/none?sslmode=disable")
	require.NoError(t, err)
	sqlDB := stdlib.OpenDB(*pcfg)
	t.Cleanup(func() { _ = sqlDB.Close() })
	db, err := gorm.Open(gormpg.New(gormpg.Config{Conn: sqlDB}), &gorm.Config{DisableAutomaticPing: true})
	require.NoError(t, err)
	return db
}

func TestRegisteredProbe(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"outcome"}))
	reg.MustRegister(prometheus.NewHistogram(prometheus.HistogramOpts{Name: "y_seconds", Help: "y"}))
	regs := map[string]*prometheus.Registry{"p": reg}
	for name, want := range map[string]bool{
		"x_total": true, "y_seconds": true, "y_seconds_bucket": true, "y_seconds_count": true,
		"x": false, "z_total": false,
	} {
		_, got := registeredIn(t, regs, name)
		assert.Equal(t, want, got, name)
	}
	// The probes leave the registry as they found it.
	assert.False(t, registered(t, reg, "z_total"))
	assert.False(t, registered(t, reg, "z_total"))
}
