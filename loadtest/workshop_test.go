package main_test

// The workshop's prove steps (docs/workshop.md), run as written against a real stack: the doc and the
// product may not disagree.
//
// The doc marks them for this test:
//
//   - a ```sh prove block: shell lines, each `lt ARGS` (the loadtest binary; it must exit 0, or N when
//     the line ends in "# exit N"), or
//     `curl -s [-H "Name: value"] localhost:8080/PATH [| grep WORD]` (run as an HTTP GET to the stack's
//     orders); $name is a column of the first row of the last ```sql prove block;
//   - a ```sql prove block: one statement, run through pgx on the stack's database (psql may not exist);
//   - a ```text expect block right after either: for sh, lines that must each be a line of the output
//     (runs of spaces count as one, … matches anything); for sql, the table as psql prints it, compared
//     column by column and row by row;
//   - <!-- prove metric NAME{LABELS} +N -->: the orders metric moved by exactly N since the section's
//     first prove step.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"idemshop/internal/testenv"
)

// proveStep is one marked step of the doc.
type proveStep struct {
	section string // the "## " heading it is under
	line    int    // of its opening fence or comment, 1-based
	kind    string // "sh", "sql" or "metric"
	body    string // the commands, the statement, or the metric's name
	delta   float64
	expect  *string // the text expect block after it, if any
}

var proveMetric = regexp.MustCompile(`^<!-- prove metric (\S+) ([+-]\d+) -->$`)

// parseProve reads the marked steps of a workshop doc.
func parseProve(doc string) ([]proveStep, error) {
	var steps []proveStep
	section := ""
	lines := strings.Split(doc, "\n")
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimSpace(lines[i])
		if strings.HasPrefix(lines[i], "## ") {
			section = strings.TrimPrefix(lines[i], "## ")
			continue
		}
		if m := proveMetric.FindStringSubmatch(trimmed); m != nil {
			d, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", i+1, err)
			}
			steps = append(steps, proveStep{section: section, line: i + 1, kind: "metric", body: m[1], delta: d})
			continue
		}
		if !strings.HasPrefix(trimmed, "```") {
			continue
		}
		info := strings.Fields(strings.TrimPrefix(trimmed, "```"))
		indent := lines[i][:len(lines[i])-len(strings.TrimLeft(lines[i], " "))]
		start := i + 1
		body, end, err := fenceBody(lines, start, indent)
		if err != nil {
			return nil, err
		}
		i = end
		switch {
		case slices.Equal(info, []string{"sh", "prove"}), slices.Equal(info, []string{"sql", "prove"}):
			steps = append(steps, proveStep{section: section, line: start, kind: info[0], body: body})
		case slices.Equal(info, []string{"text", "expect"}):
			if len(steps) == 0 || steps[len(steps)-1].kind == "metric" || steps[len(steps)-1].expect != nil {
				return nil, fmt.Errorf("line %d: a text expect block follows no prove block", start)
			}
			steps[len(steps)-1].expect = &body
		}
	}
	return steps, nil
}

// fenceBody returns the lines of the fenced block from start (indent removed) and the closing line.
func fenceBody(lines []string, start int, indent string) (string, int, error) {
	var b []string
	for j := start; j < len(lines); j++ {
		if strings.TrimSpace(lines[j]) == "```" {
			return strings.Join(b, "\n"), j, nil
		}
		b = append(b, strings.TrimPrefix(lines[j], indent))
	}
	return "", 0, fmt.Errorf("line %d: unclosed code block", start)
}

// sqlResult is a statement's answer as text, as psql shows it (NULL is "").
type sqlResult struct {
	columns []string
	rows    [][]string
}

// proveRun is what a step produced, kept to check the step against a changed doc too.
type proveRun struct {
	out    string
	result sqlResult
	moved  float64
}

// checkProve compares what a step produced with what the doc promises.
func checkProve(s proveStep, r proveRun) error {
	switch {
	case s.kind == "metric":
		if r.moved != s.delta {
			return fmt.Errorf("%s moved by %v, the doc says %+v", s.body, r.moved, s.delta)
		}
	case s.expect == nil:
	case s.kind == "sh":
		var got []string
		for l := range strings.Lines(r.out) {
			got = append(got, strings.Join(strings.Fields(l), " "))
		}
		for want := range strings.Lines(*s.expect) {
			want = strings.Join(strings.Fields(want), " ")
			if want == "" {
				continue
			}
			parts := strings.Split(want, "…")
			for i := range parts {
				parts[i] = regexp.QuoteMeta(parts[i])
			}
			re := regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
			if !slices.ContainsFunc(got, re.MatchString) {
				return fmt.Errorf("no line of the output is %q; the output:\n%s", want, r.out)
			}
		}
	case s.kind == "sql":
		want, err := parseTable(*s.expect)
		if err != nil {
			return err
		}
		if !slices.Equal(want.columns, r.result.columns) {
			return fmt.Errorf("columns %q, the doc says %q", r.result.columns, want.columns)
		}
		if !slices.EqualFunc(want.rows, r.result.rows, slices.Equal) {
			return fmt.Errorf("rows %q, the doc says %q", r.result.rows, want.rows)
		}
	}
	return nil
}

var rowCount = regexp.MustCompile(`^\((\d+) rows?\)$`)

// parseTable reads a table as psql prints it: a header, a rule, the rows, "(N rows)".
func parseTable(text string) (sqlResult, error) {
	cells := func(l string) []string {
		c := strings.Split(l, "|")
		for i := range c {
			c[i] = strings.TrimSpace(c[i])
		}
		return c
	}
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) < 3 {
		return sqlResult{}, fmt.Errorf("not a psql table: %q", text)
	}
	t := sqlResult{columns: cells(lines[0])}
	for _, l := range lines[2:] {
		if m := rowCount.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			if n, _ := strconv.Atoi(m[1]); n != len(t.rows) {
				return t, fmt.Errorf("the table says (%s rows) and shows %d", m[1], len(t.rows))
			}
			return t, nil
		}
		t.rows = append(t.rows, cells(l))
	}
	return t, errors.New("the table has no (N rows) line")
}

// shellWords splits a command line into words, with double quotes and $name from vars.
func shellWords(line string, vars map[string]string) []string {
	var words []string
	var w strings.Builder
	in, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '"':
			quoted, in = !quoted, true
		case c == ' ' && !quoted:
			if in {
				words = append(words, w.String())
				w.Reset()
			}
			in = false
		case c == '$':
			j := i + 1
			for j < len(line) && (line[j] == '_' || line[j] >= 'a' && line[j] <= 'z') {
				j++
			}
			w.WriteString(vars[line[i+1:j]])
			i, in = j-1, true
		default:
			w.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, w.String())
	}
	return words
}

// workshop is the stack the prove steps run against.
type workshop struct {
	t         *testing.T
	s         *stack
	ordersURL string
	db        *pgx.Conn
	vars      map[string]string
}

// shell runs one line of a sh prove block and returns its output.
func (w *workshop) shell(line string) string {
	t := w.t
	line, comment, _ := strings.Cut(line, " # ")
	want := 0 // the exit status, unless the line's comment says "exit N"
	if n, ok := strings.CutPrefix(strings.TrimSpace(comment), "exit "); ok {
		var err error
		want, err = strconv.Atoi(n)
		require.NoError(t, err, "%q", comment)
	}
	pipeline := strings.Split(strings.TrimSpace(line), " | ")
	words := shellWords(pipeline[0], w.vars)
	var out string
	switch words[0] {
	case "lt":
		code, stdout := w.s.loadtest(w.ordersURL, words[1:]...)
		assert.Equal(t, want, code, "%s: exit status", line)
		out = string(stdout)
	case "curl":
		req, err := http.NewRequest(http.MethodGet, "", nil)
		require.NoError(t, err)
		for i := 1; i < len(words); i++ {
			switch {
			case words[i] == "-s":
			case words[i] == "-H" && i+1 < len(words):
				name, value, _ := strings.Cut(words[i+1], ":")
				req.Header.Set(name, strings.TrimSpace(value))
				i++
			case strings.HasPrefix(words[i], "localhost:8080/"):
				req.URL, err = req.URL.Parse(w.ordersURL + strings.TrimPrefix(words[i], "localhost:8080"))
				require.NoError(t, err)
			default:
				t.Fatalf("%q: this test runs curl -s [-H ...] localhost:8080/PATH only", line)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		out = string(b)
	default:
		t.Fatalf("%q: this test runs lt and curl only", line)
	}
	for _, stage := range pipeline[1:] {
		f := shellWords(stage, w.vars)
		require.True(t, len(f) == 2 && f[0] == "grep", "%q: only | grep WORD", line)
		var kept strings.Builder
		for l := range strings.Lines(out) {
			if strings.Contains(l, f[1]) {
				kept.WriteString(l)
			}
		}
		out = kept.String()
	}
	return out
}

// query runs a statement with every column as text, as psql shows it, and keeps the first row's
// columns as variables for the shell lines after it.
func (w *workshop) query(sql string) sqlResult {
	rr := w.db.PgConn().ExecParams(context.Background(), sql, nil, nil, nil, []int16{0})
	res := rr.Read()
	require.NoError(w.t, res.Err, "%s", sql)
	var r sqlResult
	for _, f := range res.FieldDescriptions {
		r.columns = append(r.columns, f.Name)
	}
	for _, row := range res.Rows {
		var cells []string
		for _, v := range row {
			cells = append(cells, string(v)) // NULL is nil: ""
		}
		r.rows = append(r.rows, cells)
	}
	if len(r.rows) > 0 {
		for i, c := range r.columns {
			w.vars[c] = r.rows[0][i]
		}
	}
	return r
}

// metrics reads orders' /metrics: series → value.
func (w *workshop) metrics() map[string]float64 {
	resp, err := http.Get(w.ordersURL + "/metrics")
	require.NoError(w.t, err)
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") {
			continue
		}
		if i := strings.LastIndexByte(l, ' '); i > 0 {
			if v, err := strconv.ParseFloat(l[i+1:], 64); err == nil {
				m[l[:i]] = v
			}
		}
	}
	require.NoError(w.t, sc.Err())
	return m
}

func TestWorkshopProveSteps(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole stack")
	}
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "docs", "workshop.md"))
	require.NoError(t, err)
	doc := string(raw)
	steps, err := parseProve(doc)
	require.NoError(t, err)
	kinds := map[string]int{}
	for _, s := range steps {
		kinds[s.kind]++
	}
	t.Logf("%d prove steps: %v", len(steps), kinds)
	require.NotZero(t, kinds["sh"])
	require.NotZero(t, kinds["sql"])
	require.NotZero(t, kinds["metric"])

	s := newNamedStack(t, "workshop")
	mock := testenv.FreeAddr(t)
	s.mockURL = "http://" + mock
	s.start("payments-mock", mock)
	orders := testenv.FreeAddr(t)
	s.start("orders", orders, "PAYMENTS_URL="+s.mockURL, "CALLBACK_URL=http://"+orders+"/v1/payments/callback")
	s.start("points-consumer", testenv.FreeAddr(t))
	conn, err := pgx.Connect(context.Background(), s.dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	w := &workshop{t: t, s: s, ordersURL: "http://" + orders, db: conn, vars: map[string]string{}}

	runs := make([]proveRun, len(steps))
	var before map[string]float64
	for i, st := range steps {
		if i == 0 || st.section != steps[i-1].section {
			before = w.metrics()
		}
		switch st.kind {
		case "sh":
			var out strings.Builder
			for l := range strings.Lines(st.body) {
				if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
					out.WriteString(w.shell(l))
				}
			}
			runs[i].out = out.String()
		case "sql":
			runs[i].result = w.query(st.body)
		case "metric":
			now := w.metrics()
			v, ok := now[st.body]
			require.True(t, ok, "line %d: orders has no series %s", st.line, st.body)
			runs[i].moved = v - before[st.body]
		}
		assert.NoError(t, checkProve(st, runs[i]), "docs/workshop.md line %d (%s)", st.line, st.section)
	}

	// The check has teeth: the same outputs against a doc with one number changed in each kind of
	// step fail it.
	for _, c := range []struct{ from, to string }{
		{"callbacks applied   20   (want 20)", "callbacks applied   21   (want 20)"},
		{" duplicate |    40", " duplicate |    41"},
		{`{outcome="applied"} +20 -->`, `{outcome="applied"} +21 -->`},
		{`"received":3,"applied":1`, `"received":3,"applied":2`},
	} {
		require.Equal(t, 1, strings.Count(doc, c.from), "the doc quotes %q once", c.from)
		changed, err := parseProve(strings.Replace(doc, c.from, c.to, 1))
		require.NoError(t, err)
		require.Len(t, changed, len(steps))
		failed := 0
		for i := range changed {
			if checkProve(changed[i], runs[i]) != nil && checkProve(steps[i], runs[i]) == nil {
				failed++
			}
		}
		assert.Equal(t, 1, failed, "a doc saying %q instead of %q disagrees with the product", c.to, c.from)
	}
}
