package deploy_test

import (
	"bufio"
	"context"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"idemshop/internal/platform/config"
	"idemshop/internal/testenv"
)

// Paths are relative to this package's directory, where go test runs.
const (
	composeFile  = "../docker-compose.yml"
	dockerfile   = "../Dockerfile"
	dockerignore = "../.dockerignore"
	binDir       = "/usr/local/bin/" // where the Dockerfile puts the binaries
)

// app is a compose service that runs one of our binaries from the image the Dockerfile builds.
type app struct {
	binary  string       // the command's directory (cmd/<binary>, or loadtest/), run as binDir+binary
	config  reflect.Type // its config struct: env names and defaults come from the struct tags
	oneShot bool         // runs to completion (no healthcheck, no port)
	profile string       // "" = started by a plain `docker compose up`
}

// The services the code expects. Every binary (cmd/*, and the top-level loadtest) except healthcheck
// (the containers' probe) runs in at least one of them: TestDockerfileBuildsEveryBinary checks that no
// binary is forgotten.
var apps = map[string]app{
	"migrate":         {binary: "orders", config: reflect.TypeFor[config.Orders](), oneShot: true},
	"orders":          {binary: "orders", config: reflect.TypeFor[config.Orders]()},
	"payments-mock":   {binary: "payments-mock", config: reflect.TypeFor[config.PaymentsMock]()},
	"points-consumer": {binary: "points-consumer", config: reflect.TypeFor[config.PointsConsumer]()},
	"loadtest":        {binary: "loadtest", config: reflect.TypeFor[config.Loadtest](), oneShot: true, profile: "load"},
}

// backing maps each backing service to the variable whose default URL reaches it.
var backing = map[string]string{"postgres": "DATABASE_URL", "redis": "REDIS_URL", "rabbitmq": "AMQP_URL"}

// observability is the profile of Prometheus and Grafana.
var observability = []string{"prometheus", "grafana"}

// deviations are the only values that may differ from the Go defaults once hostnames are mapped
// (127.0.0.1 → service name); docker-compose.yml's header says why, and check says what is allowed.
var deviations = map[string]map[string]func(v string) bool{
	// The migrate service has migrated before orders starts; a second migration at start is noise.
	"orders": {"MIGRATE_ON_START": is("false"), "ORDERS_LAB": isBool,
		// The /lab page's platform controls need payments-mock's ADMIN_TOKEN (checked equal below), and
		// its "suppressed" counts points-consumer's metrics, which orders does not wait for (the page
		// polls; a 127.0.0.1 default would be orders' own container).
		"PAYMENTS_ADMIN_TOKEN": notEmpty, "POINTS_METRICS_URL": is("http://points-consumer:8082/metrics")},
	// The demo is the lab, as `make demo`: unsafe variants mounted (ORDERS_LAB=false turns them off).
	"points-consumer": {"ORDERS_LAB": isBool},
	// /admin answers loopback peers only without a token; loadtest comes from another container.
	"payments-mock": {"ADMIN_TOKEN": notEmpty},
	"loadtest":      {"ADMIN_TOKEN": notEmpty},
}

func is(want string) func(string) bool { return func(v string) bool { return v == want } }
func isBool(v string) bool             { _, err := strconv.ParseBool(v); return err == nil }
func notEmpty(v string) bool           { return v != "" }

// loadCompose loads docker-compose.yml with compose-go, as `docker compose` does, with the given
// profiles active ("*" = all) and an empty environment, so every ${VAR:-default} takes its default.
func loadCompose(t *testing.T, profiles ...string) *types.Project {
	t.Helper()
	abs, err := filepath.Abs(composeFile)
	require.NoError(t, err)
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  filepath.Dir(abs),
		ConfigFiles: []types.ConfigFile{{Filename: abs}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) { o.Profiles = profiles })
	require.NoError(t, err, "docker-compose.yml does not load with profiles %v", profiles)
	return p
}

// envDefaults returns every variable of a config struct with its envDefault ("" when it has none),
// walking embedded structs the way caarlos0/env does.
func envDefaults(t reflect.Type) map[string]string {
	out := map[string]string{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("env"), ",")
		switch {
		case name != "":
			out[name] = f.Tag.Get("envDefault")
		case f.Type.Kind() == reflect.Struct && f.Tag.Get("envPrefix") == "":
			for k, v := range envDefaults(f.Type) {
				out[k] = v
			}
		}
	}
	return out
}

// defaultPort is the port of a config's default HTTP_ADDR (":8080" → 8080).
func defaultPort(t *testing.T, a app) uint32 {
	t.Helper()
	_, port, err := net.SplitHostPort(envDefaults(a.config)["HTTP_ADDR"])
	require.NoError(t, err, "%s: HTTP_ADDR default", a.binary)
	n, err := strconv.ParseUint(port, 10, 16)
	require.NoError(t, err)
	return uint32(n)
}

func TestComposeProfiles(t *testing.T) {
	t.Parallel()
	base := slices.Collect(maps.Keys(backing)) // what a plain `docker compose up` starts
	for name, a := range apps {
		if a.profile == "" {
			base = append(base, name)
		}
	}
	cases := map[string]struct {
		profiles []string
		want     []string
	}{
		"no profile: the demo":            {nil, base},
		"load":                            {[]string{"load"}, append(slices.Clone(base), "loadtest")},
		"observability":                   {[]string{"observability"}, append(slices.Clone(base), observability...)},
		"every profile at once":           {[]string{"*"}, append(append(slices.Clone(base), "loadtest"), observability...)},
		"load and observability":          {[]string{"load", "observability"}, append(append(slices.Clone(base), "loadtest"), observability...)},
		"an unknown profile adds nothing": {[]string{"nope"}, base},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// compose-go refuses a project whose active services depend on a disabled or missing one, so
			// loading each profile set proves that every profile refers only to defined services.
			p := loadCompose(t, tc.profiles...)
			assert.ElementsMatch(t, tc.want, p.ServiceNames())
			for _, s := range p.Services {
				for dep := range s.DependsOn {
					assert.Contains(t, p.Services, dep, "%s depends on %s, which is not active", s.Name, dep)
				}
				for _, prof := range s.Profiles {
					assert.Contains(t, []string{"load", "observability"}, prof, "%s: unexpected profile", s.Name)
				}
			}
		})
	}
}

func TestComposeServicesAndHealthchecks(t *testing.T) {
	t.Parallel()
	p := loadCompose(t, "*")
	oneShot := func(name string) bool { return apps[name].oneShot }
	expected := slices.Concat(slices.Collect(maps.Keys(apps)), slices.Collect(maps.Keys(backing)), observability)
	for _, name := range expected {
		s, ok := p.Services[name]
		if !assert.True(t, ok, "service %s is missing", name) {
			continue
		}
		if oneShot(name) {
			assert.Contains(t, []string{"", "no"}, s.Restart, "%s runs once: it must not restart", name)
			continue
		}
		hc := s.HealthCheck
		if assert.NotNil(t, hc, "%s has no healthcheck: depends_on service_healthy and up --wait need one", name) {
			assert.False(t, hc.Disable, name)
			assert.NotEmpty(t, hc.Test, name)
		}
	}

	// Our processes are probed on their own /readyz, at the port of their default HTTP_ADDR.
	for name, a := range apps {
		if a.oneShot {
			continue
		}
		want := types.HealthCheckTest{"CMD", binDir + "healthcheck",
			"http://127.0.0.1:" + strconv.Itoa(int(defaultPort(t, a))) + "/readyz"}
		if s, ok := p.Services[name]; ok && s.HealthCheck != nil {
			assert.Equal(t, want, s.HealthCheck.Test, name)
		}
	}

	for _, s := range p.Services {
		for dep, d := range s.DependsOn {
			want := types.ServiceConditionHealthy
			if oneShot(dep) {
				want = types.ServiceConditionCompletedSuccessfully
			}
			assert.Equal(t, want, d.Condition, "%s → %s", s.Name, dep)
		}
	}

	// `up --wait` fails on a one-shot container that exits, unless a running service waits for its
	// success (docker/compose#10596). migrate is in the default set, so it must be waited for.
	for name, a := range apps {
		if !a.oneShot || a.profile != "" {
			continue
		}
		var waiters []string
		for _, s := range p.Services {
			if d, ok := s.DependsOn[name]; ok && d.Condition == types.ServiceConditionCompletedSuccessfully {
				waiters = append(waiters, s.Name)
			}
		}
		assert.NotEmpty(t, waiters, "no service waits for %s to complete: `up --wait` would fail on its exit", name)
	}
}

func TestComposeRunsTheRightBinaries(t *testing.T) {
	t.Parallel()
	p := loadCompose(t, "*")
	for name, a := range apps {
		s, ok := p.Services[name]
		if !assert.True(t, ok, name) {
			continue
		}
		require.NotNil(t, s.Build, "%s must be built from the Dockerfile", name)
		assert.Empty(t, s.Image, "%s: the image is built, not pulled", name)
		argv := slices.Concat(s.Entrypoint, s.Command)
		if assert.NotEmpty(t, argv, name) {
			assert.Equal(t, binDir+a.binary, argv[0], name)
		}
	}
	assert.Equal(t, types.ShellCommand{binDir + "orders", "migrate"}, p.Services["migrate"].Command)
	assert.Equal(t, types.ShellCommand{"incident"}, p.Services["loadtest"].Command,
		"the load profile runs the incident; `docker compose run --rm loadtest lab all` replaces it")
}

func TestComposeEnvMatchesConfigDefaults(t *testing.T) {
	t.Parallel()
	p := loadCompose(t, "*")
	shared := map[string]map[string]string{} // variable → service → value
	for name, a := range apps {
		s, ok := p.Services[name]
		if !assert.True(t, ok, name) {
			continue
		}
		defaults := envDefaults(a.config)
		for key, val := range s.Environment {
			def, known := defaults[key]
			if !assert.True(t, known, "%s sets %s, which %s does not read", name, key, a.config.Name()) {
				continue
			}
			require.NotNil(t, val, "%s: %s has no value", name, key)
			v := *val
			if shared[key] == nil {
				shared[key] = map[string]string{}
			}
			shared[key][name] = v
			if allowed, ok := deviations[name][key]; ok {
				assert.True(t, allowed(v), "%s: %s=%q", name, key, v)
				continue
			}
			if v == def {
				continue
			}
			host, ok := sameButHost(v, def)
			if !assert.True(t, ok, "%s: %s=%q, want the default %q (only the host may change)", name, key, v, def) {
				continue
			}
			if host == name {
				continue // orders' own CALLBACK_URL
			}
			assert.Contains(t, p.Services, host, "%s: %s names host %s, which is not a service", name, key, host)
			assert.Contains(t, dependencies(p, name), host, "%s: %s reaches %s, which it does not wait for", name, key, host)
		}
	}
	// The same variable means the same thing everywhere: one database, one secret, one admin token.
	for key, byService := range shared {
		values := slices.Compact(slices.Sorted(maps.Values(byService)))
		assert.Len(t, values, 1, "%s differs between services: %v", key, byService)
	}
	assert.Contains(t, shared["ADMIN_TOKEN"], "loadtest", "loadtest needs payments-mock's ADMIN_TOKEN")
	assert.Equal(t, shared["ADMIN_TOKEN"]["payments-mock"], shared["PAYMENTS_ADMIN_TOKEN"]["orders"],
		"orders' /lab controls send payments-mock's ADMIN_TOKEN")
}

// sameButHost reports whether got is the default URL def with its 127.0.0.1 host replaced by a name,
// and returns that name.
func sameButHost(got, def string) (string, bool) {
	g, err := url.Parse(got)
	if err != nil || g.Host == "" {
		return "", false
	}
	d, err := url.Parse(def)
	if err != nil || d.Hostname() != "127.0.0.1" {
		return "", false
	}
	host := g.Hostname()
	g.Host = net.JoinHostPort("127.0.0.1", g.Port())
	return host, g.String() == d.String()
}

// dependencies returns every service name waits for, directly or through others.
func dependencies(p *types.Project, name string) []string {
	var out []string
	var walk func(string)
	walk = func(n string) {
		for dep := range p.Services[n].DependsOn {
			if !slices.Contains(out, dep) {
				out = append(out, dep)
				walk(dep)
			}
		}
	}
	walk(name)
	return out
}

func TestComposePorts(t *testing.T) {
	t.Parallel()
	p := loadCompose(t, "*")
	for _, s := range p.Services {
		for _, port := range s.Ports {
			assert.Equal(t, "127.0.0.1", port.HostIP, "%s publishes %d beyond loopback", s.Name, port.Target)
			// With no *_PORT variable set, the host sees the same port as the container.
			assert.Equal(t, strconv.Itoa(int(port.Target)), port.Published, "%s: %d", s.Name, port.Target)
		}
	}
	for name, a := range apps {
		s := p.Services[name]
		if a.oneShot {
			assert.Empty(t, s.Ports, "%s runs once and serves nothing", name)
			continue
		}
		if assert.Len(t, s.Ports, 1, name) {
			assert.Equal(t, defaultPort(t, a), s.Ports[0].Target, "%s: the port of the default HTTP_ADDR", name)
		}
		assert.NotContains(t, s.Environment, "HTTP_ADDR", "%s: keep the default address", name)
	}
	// The backing services listen where the default URLs (and so the binaries) expect them.
	orders := envDefaults(apps["orders"].config)
	for name, variable := range backing {
		u, err := url.Parse(orders[variable])
		require.NoError(t, err)
		n, err := strconv.ParseUint(u.Port(), 10, 16)
		require.NoError(t, err)
		var targets []uint32
		for _, port := range p.Services[name].Ports {
			targets = append(targets, port.Target)
		}
		assert.Contains(t, targets, uint32(n), "%s: %s's default port", name, variable)
	}
}

var (
	// majorTag matches a tag that starts with a version number: 16, 3-management, v3.5.0, 1.26.
	majorTag = regexp.MustCompile(`^v?[0-9]+([.-][0-9A-Za-z.-]+)?$`)
	// distroName matches a distroless image named after its Debian release: static-debian12.
	distroName = regexp.MustCompile(`-debian[0-9]+$`)
)

// pinsMajor reports whether an image reference pins a major version: in its tag, or, for distroless
// (whose tags are variants such as nonroot), in its name (static-debian12).
func pinsMajor(ref string) bool {
	ref, _, _ = strings.Cut(ref, "@") // a digest pins even more, but keep the readable tag
	slash := strings.LastIndex(ref, "/")
	name, tag, ok := strings.Cut(ref[slash+1:], ":")
	if !ok || tag == "latest" {
		return false
	}
	return majorTag.MatchString(tag) || distroName.MatchString(name)
}

func TestImagesPinMajorVersions(t *testing.T) {
	t.Parallel()
	for ref, want := range map[string]bool{
		"postgres:16": true, "rabbitmq:3-management": true, "prom/prometheus:v3.5.0": true,
		"gcr.io/distroless/static-debian12:nonroot": true, "postgres": false, "redis:latest": false,
		"rabbitmq:management": false, "localhost:5000/x": false,
	} {
		assert.Equal(t, want, pinsMajor(ref), ref)
	}

	p := loadCompose(t, "*")
	for _, s := range p.Services {
		if s.Build != nil {
			continue // our image: its base images are checked below
		}
		assert.True(t, pinsMajor(s.Image), "%s: image %q does not pin a major version", s.Name, s.Image)
	}
	stages := dockerStages(t)
	require.NotEmpty(t, stages)
	for _, st := range stages {
		if slices.ContainsFunc(stages, func(o stage) bool { return o.name == st.from }) {
			continue // FROM an earlier stage
		}
		assert.True(t, pinsMajor(st.from), "Dockerfile: FROM %s does not pin a major version", st.from)
	}
}

// The stateful services run an exact release (major.minor[.patch]), the same one testcontainers starts
// in internal/testenv: a test that passed on a container then passed on what the demo runs, and a new
// minor release (RabbitMQ 4 changes how redeliveries are counted) is a change someone made on purpose.
func TestStatefulImagesAreExactAndMatchTheTestImages(t *testing.T) {
	t.Parallel()
	p := loadCompose(t, "*")
	exact := regexp.MustCompile(`:[0-9]+\.[0-9]+(\.[0-9]+)?(-[a-z]+)?$`)
	for name, want := range map[string]string{
		"postgres": testenv.PostgresImage, "redis": testenv.RedisImage, "rabbitmq": testenv.RabbitMQImage,
	} {
		s, ok := p.Services[name]
		require.True(t, ok, "compose has no %s service", name)
		assert.Equal(t, want, s.Image, "%s: compose and internal/testenv run different images", name)
		assert.Regexp(t, exact, s.Image, "%s: pin the exact release, not only the major version", name)
	}
}

// stage is one FROM of the Dockerfile, with the instructions that follow it.
type stage struct {
	from, name string
	lines      []string
}

func dockerStages(t *testing.T) []stage {
	t.Helper()
	f, err := os.Open(dockerfile)
	require.NoError(t, err)
	defer f.Close()
	var stages []stage
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if strings.EqualFold(fields[0], "FROM") {
			st := stage{from: fields[len(fields)-1]}
			if len(fields) >= 4 && strings.EqualFold(fields[len(fields)-2], "AS") {
				st.from, st.name = fields[len(fields)-3], fields[len(fields)-1]
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) > 0 {
			stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, line)
		}
	}
	require.NoError(t, sc.Err())
	return stages
}

func TestDockerfileBuildsEveryBinary(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(dockerfile)
	require.NoError(t, err)
	text := string(raw)
	entries, err := os.ReadDir("../cmd")
	require.NoError(t, err)
	var binaries []string
	for _, e := range entries {
		// cmd/mutants is a developer tool (make mutants): it runs tests on a source tree, never in the image.
		if e.IsDir() && e.Name() != "mutants" {
			binaries = append(binaries, e.Name())
			assert.Contains(t, text, "./cmd/"+e.Name(), "the Dockerfile does not build cmd/%s", e.Name())
		}
	}
	// loadtest is the one command outside cmd/: it lives at the top of the repo (go run ./loadtest).
	binaries = append(binaries, "loadtest")
	assert.Regexp(t, `\./loadtest(\s|$)`, text, "the Dockerfile does not build ./loadtest")
	// Every binary but the probe runs in some service; a new binary needs a service or a reason here.
	for _, b := range binaries {
		if b == "healthcheck" {
			continue
		}
		assert.True(t, slices.ContainsFunc(slices.Collect(maps.Values(apps)), func(a app) bool { return a.binary == b }),
			"cmd/%s runs in no compose service", b)
	}
	assert.Contains(t, text, "CGO_ENABLED=0", "static binaries for the distroless runtime")

	stages := dockerStages(t)
	runtime := stages[len(stages)-1]
	assert.Equal(t, "runtime", runtime.name, "compose builds target: runtime, the last stage")
	p := loadCompose(t, "*")
	for name := range apps {
		if b := p.Services[name].Build; b != nil {
			assert.Equal(t, runtime.name, b.Target, name)
			assert.Equal(t, "Dockerfile", filepath.Base(b.Dockerfile), name)
		}
	}
	var user string
	for _, l := range runtime.lines {
		if f := strings.Fields(l); strings.EqualFold(f[0], "USER") && len(f) > 1 {
			user = f[1]
		}
		if strings.HasPrefix(l, "COPY --from=") {
			assert.Contains(t, l, binDir, "binaries go to %s, where compose runs them", binDir)
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	assert.NotContains(t, []string{"", "0", "root"}, uid, "the runtime stage must run as non-root, got USER %q", user)
}

func TestDockerignoreKeepsTheBuildInputs(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(dockerignore)
	require.NoError(t, err)
	for line := range strings.Lines(string(raw)) {
		pattern := strings.Trim(strings.TrimSpace(line), "/")
		if pattern == "" || strings.HasPrefix(pattern, "#") || strings.HasPrefix(pattern, "!") {
			continue
		}
		for _, need := range []string{"go.mod", "go.sum", "cmd", "internal", "migrations", "cmd/orders/main.go",
			"loadtest", "loadtest/main.go", "loadtest/replays", "loadtest/replays/incident-triple-callback.jsonl"} {
			matched, err := filepath.Match(pattern, need)
			require.NoError(t, err, pattern)
			assert.False(t, matched, ".dockerignore pattern %q drops %s, which the build needs", pattern, need)
		}
	}
}

func TestPrometheusScrapesEveryProcess(t *testing.T) {
	t.Parallel()
	var cfg struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			MetricsPath   string `yaml:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, "prometheus/prometheus.yml", &cfg)
	got := map[string]string{} // job → target
	for _, sc := range cfg.ScrapeConfigs {
		assert.Contains(t, []string{"", "/metrics"}, sc.MetricsPath, sc.JobName)
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				got[sc.JobName] = target
			}
		}
	}
	want := map[string]string{}
	for name, a := range apps {
		if !a.oneShot {
			want[name] = name + ":" + strconv.Itoa(int(defaultPort(t, a)))
		}
	}
	assert.Equal(t, want, got, "one job per process, named after its service, at its default port")

	p := loadCompose(t, "observability")
	assert.Equal(t, "/etc/prometheus/prometheus.yml", mountOf(t, p.Services["prometheus"], "deploy/prometheus/prometheus.yml"))
}

func TestGrafanaProvisioning(t *testing.T) {
	t.Parallel()
	p := loadCompose(t, "observability")
	grafana := p.Services["grafana"]

	var ds struct {
		Datasources []struct{ Name, UID, Type, URL string } `yaml:"datasources"`
	}
	readYAML(t, "grafana/provisioning/datasources/prometheus.yml", &ds)
	require.Len(t, ds.Datasources, 1)
	assert.Equal(t, "prometheus", ds.Datasources[0].Type)
	assert.Equal(t, dashboardDatasourceUID, ds.Datasources[0].UID, "the dashboard's panels use this uid")
	u, err := url.Parse(ds.Datasources[0].URL)
	require.NoError(t, err)
	require.Contains(t, p.Services, u.Hostname())
	assert.Equal(t, "9090", u.Port(), "Prometheus' port")
	assert.Contains(t, dependencies(p, "grafana"), u.Hostname())

	var dash struct {
		Providers []struct {
			Type    string
			Options struct{ Path string } `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, "grafana/provisioning/dashboards/idemshop.yml", &dash)
	require.Len(t, dash.Providers, 1)
	assert.Equal(t, "file", dash.Providers[0].Type)
	dashboards := mountOf(t, grafana, "deploy/grafana/dashboards")
	assert.Equal(t, dashboards, dash.Providers[0].Options.Path, "the provider reads the mounted dashboards")
	assert.Equal(t, "/etc/grafana/provisioning", mountOf(t, grafana, "deploy/grafana/provisioning"))

	home := grafana.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
	require.NotNil(t, home)
	assert.Equal(t, dashboards, filepath.Dir(*home))
	assert.FileExists(t, filepath.Join("grafana/dashboards", filepath.Base(*home)))
}

// mountOf returns where a bind mount of the repository path src lands in the service's container,
// and checks it is read-only.
func mountOf(t *testing.T, s types.ServiceConfig, src string) string {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join("..", src))
	require.NoError(t, err)
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeBind && v.Source == abs {
			assert.True(t, v.ReadOnly, "%s: mount %s read-only", s.Name, src)
			return v.Target
		}
	}
	t.Fatalf("%s does not mount %s", s.Name, src)
	return ""
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, v), path)
}
