package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/ratelimit/redislimit/redistest"
)

// The operator pack's dashboard and recording rules (docs/observability.md, the dashboard).
const (
	dashboardFile = "../deploy/grafana/sheba.json"
	rulesFile     = "../deploy/prometheus/rules.yaml"
)

// dashboardMetrics are the metrics the dashboard must show (docs/observability.md, the dashboard);
// a name ending in "_" stands for every family with that prefix that a
// live sheba exposes.
var dashboardMetrics = []string{
	"sheba_requests_total",
	"grpc_server_handling_seconds_bucket",
	"sheba_rejected_total",
	"sheba_inflight_requests",
	"sheba_inflight_limit",
	"sheba_db_pool_",
	"sheba_webhook_backlog",
	"sheba_webhook_attempts_total",
	"sheba_hook_requests_total",
	"sheba_hook_duration_seconds_bucket",
	"sheba_streams_open",
	"sheba_stream_events_total",
	"sheba_streams_ended_total",
}

// targetLabels are the labels Prometheus adds to every scraped series: a
// query may use them though /metrics does not show them.
var targetLabels = map[string]bool{"instance": true, "job": true}

// grafanaDashboard is the part of a Grafana dashboard the test reads.
type grafanaDashboard struct {
	SchemaVersion int
	Templating    struct{ List []grafanaVariable }
	Panels        []grafanaPanel
}

type grafanaDatasource struct{ Type, UID string }

type grafanaVariable struct {
	Name, Type string
	Datasource *grafanaDatasource
	// Query is a string, or an object with the string in "query".
	Query      json.RawMessage
	IncludeAll bool
	AllValue   string
}

type grafanaPanel struct {
	ID          int
	Type, Title string
	Datasource  *grafanaDatasource
	GridPos     struct{ H, W, X, Y int }
	Targets     []struct {
		RefID        string
		Datasource   *grafanaDatasource
		Expr         string
		LegendFormat string
	}
	// Panels are those of a collapsed row.
	Panels []grafanaPanel
}

// dashboardQuery is one query of the dashboard, named for messages and for
// the recording rule promtool checks it as.
type dashboardQuery struct {
	where  string // "panel 3 (Latency) B" or "variable method"
	record string // panel_3_B or variable_method
	expr   string // with Grafana's variables replaced
	legend string
	// label, for a variable's label_values(selector, label): the label
	// the selector's metric must carry.
	label string
}

// TestDashboard checks deploy/grafana/sheba.json: its shape (a datasource
// variable that every panel and query uses, unique ids, no overlapping
// panels, indented as json.Indent does), that every query parses as PromQL,
// and that every query reads only metrics a live sheba serves on /metrics
// (or rules.yaml records), with labels those metrics carry.
//
// Parsing is promtool's (`promtool check rules` on the queries written as
// recording rules), the parser of Prometheus itself, from Debian's
// prometheus package that make test installs for the rules' own tests.
// The prometheus Go module would bring that parser in-process, but it is
// far too large for the service's go.mod, and a module of its own could
// not start the live sheba: that takes this package's harness. Once
// promtool has said a query is well-formed, naming its metrics takes
// only a lexer (readPromQL, tested in TestReadPromQL).
//
// The live sheba has the external hook (answering continue) and Redis
// configured, since their metrics exist only then, and serves a few calls,
// so that the labelled counters have series. The webhook metrics are
// always registered.
func TestDashboard(t *testing.T) {
	t.Parallel()
	promtool := promtoolPath(t)
	raw, d := readDashboard(t)
	checkDashboardShape(t, raw, d)
	queries := dashboardQueries(t, d)

	failed := checkPromQL(t, promtool, queries)
	live := startDashboardSheba(t)
	recorded := recordedMetrics(t)
	used := map[string]bool{}
	for _, q := range queries {
		if failed[q.record] {
			continue
		}
		refs, err := readPromQL(q.expr)
		if err != nil {
			t.Errorf("%s: %v\n%s", q.where, err, q.expr)
			continue
		}
		for _, s := range refs.selectors {
			markUsed(t, used, recorded, s.metric)
		}
		for _, problem := range queryProblems(q, refs, live, recorded) {
			t.Errorf("%s: %s\n%s", q.where, problem, q.expr)
		}
	}

	for _, want := range dashboardMetrics {
		names := []string{want}
		if strings.HasSuffix(want, "_") {
			names = nil
			for name := range live {
				if strings.HasPrefix(name, want) {
					names = append(names, name)
				}
			}
			if len(names) == 0 {
				t.Errorf("the live sheba has no %s* metric", want)
			}
		}
		for _, name := range names {
			if !used[name] {
				t.Errorf("no panel shows %s", name)
			}
		}
	}
	var unshown []string
	for name := range live {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if strings.HasPrefix(name, "sheba_") && !used[name] && !used[base+"_bucket"] && !used[base+"_count"] {
			unshown = append(unshown, name)
		}
	}
	if len(unshown) > 0 {
		// Not an error: the dashboard shows what docs/observability.md lists,
		// and may leave out what only some set-ups have.
		slices.Sort(unshown)
		t.Logf("sheba metrics no panel shows: %s", strings.Join(unshown, " "))
	}
}

// checkDashboardShape checks what Grafana and the reader rely on, beyond
// the queries.
func checkDashboardShape(t *testing.T, raw []byte, d grafanaDashboard) {
	t.Helper()
	var tidy bytes.Buffer
	if err := json.Indent(&tidy, bytes.TrimSpace(raw), "", "  "); err != nil {
		t.Fatal(err)
	}
	tidy.WriteByte('\n')
	if !bytes.Equal(tidy.Bytes(), raw) {
		t.Errorf("%s is not indented as json.Indent does with two spaces (python3 -m json.tool --indent 2 --no-ensure-ascii writes it so)", dashboardFile)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d, want 36 or later", d.SchemaVersion)
	}
	var sources []grafanaVariable
	for _, v := range d.Templating.List {
		if v.Type == "datasource" {
			sources = append(sources, v)
		}
	}
	if len(sources) != 1 || sources[0].Name != "datasource" || string(sources[0].Query) != `"prometheus"` {
		t.Errorf("want one variable named datasource, of type datasource, with query prometheus; got %+v", sources)
	}
	usesVar := func(ds *grafanaDatasource) bool { return ds != nil && ds.UID == "${datasource}" }
	for _, v := range d.Templating.List {
		if v.Type == "query" && !usesVar(v.Datasource) {
			t.Errorf("variable %s: datasource %+v, want uid ${datasource}", v.Name, v.Datasource)
		}
	}
	ids := map[int]string{}
	var placed []grafanaPanel
	for _, p := range allPanels(d.Panels) {
		if other, ok := ids[p.ID]; ok {
			t.Errorf("panels %q and %q share id %d", other, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("panel %d (%s): gridPos %+v is not within the 24 columns", p.ID, p.Title, g)
		}
		for _, o := range placed {
			h := o.GridPos
			if g.X < h.X+h.W && h.X < g.X+g.W && g.Y < h.Y+h.H && h.Y < g.Y+g.H {
				t.Errorf("panels %d (%s) and %d (%s) overlap", o.ID, o.Title, p.ID, p.Title)
			}
		}
		placed = append(placed, p)
		if p.Type == "row" {
			continue
		}
		if !usesVar(p.Datasource) {
			t.Errorf("panel %d (%s): datasource %+v, want uid ${datasource}", p.ID, p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %d (%s) has no query", p.ID, p.Title)
		}
		refs := map[string]bool{}
		for _, q := range p.Targets {
			if refs[q.RefID] || q.RefID == "" {
				t.Errorf("panel %d (%s): refId %q is empty or not unique", p.ID, p.Title, q.RefID)
			}
			refs[q.RefID] = true
			if !usesVar(q.Datasource) {
				t.Errorf("panel %d (%s) query %s: datasource %+v, want uid ${datasource}", p.ID, p.Title, q.RefID, q.Datasource)
			}
		}
	}
}

// allPanels lists panels with those of collapsed rows.
func allPanels(panels []grafanaPanel) []grafanaPanel {
	var out []grafanaPanel
	for _, p := range panels {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// grafanaVar is a variable in a query: $name, ${name} or ${name:format}.
var grafanaVar = regexp.MustCompile(`\$(?:\{(\w+)(?::\w+)?\}|(\w+))`)

// labelValues is the query of a variable listing a label's values.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\s*\)$`)

// dashboardQueries lists every query of the dashboard, its variables
// replaced by values it can run with: Grafana's intervals by a duration, a
// template variable by its All value (a variable with none, or unknown,
// is an error).
func dashboardQueries(t *testing.T, d grafanaDashboard) []dashboardQuery {
	t.Helper()
	values := map[string]string{"__rate_interval": "5m", "__interval": "5m", "__range": "1h"}
	for _, v := range d.Templating.List {
		if v.Type != "datasource" && v.IncludeAll && v.AllValue != "" {
			values[v.Name] = v.AllValue
		}
	}
	expand := func(where, q string) string {
		return grafanaVar.ReplaceAllStringFunc(q, func(m string) string {
			sub := grafanaVar.FindStringSubmatch(m)
			name := sub[1] + sub[2]
			if v, ok := values[name]; ok {
				return v
			}
			if strings.Trim(name, "0123456789") != "" {
				// Not $1, a regex group in label_replace.
				t.Errorf("%s: %s is not a variable with an All value", where, m)
			}
			return m
		})
	}

	var queries []dashboardQuery
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		where := "variable " + v.Name
		var q string
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var obj struct{ Query string }
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				t.Errorf("%s: query %s is neither a string nor an object with one", where, v.Query)
				continue
			}
			q = obj.Query
		}
		m := labelValues.FindStringSubmatch(strings.TrimSpace(q))
		if m == nil {
			t.Errorf("%s: query %q, want label_values(selector, label)", where, q)
			continue
		}
		queries = append(queries, dashboardQuery{where: where, record: "variable_" + v.Name, expr: expand(where, m[1]), label: m[2]})
	}
	for _, p := range allPanels(d.Panels) {
		for _, target := range p.Targets {
			where := fmt.Sprintf("panel %d (%s) %s", p.ID, p.Title, target.RefID)
			queries = append(queries, dashboardQuery{
				where:  where,
				record: fmt.Sprintf("panel_%d_%s", p.ID, target.RefID),
				expr:   expand(where, target.Expr),
				legend: target.LegendFormat,
			})
		}
	}
	return queries
}

// checkPromQL has promtool parse every query, as the expression of a
// recording rule, and returns the records of those it rejects. promtool
// stops at a file's first error, so after a failure each query is checked
// alone.
func checkPromQL(t *testing.T, promtool string, queries []dashboardQuery) map[string]bool {
	t.Helper()
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	check := func(qs []dashboardQuery) (string, error) {
		var rules []rule
		for _, q := range qs {
			rules = append(rules, rule{q.record, q.expr})
		}
		b, err := yaml.Marshal(map[string]any{"groups": []map[string]any{{"name": "dashboard", "rules": rules}}})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "dashboard.rules.yaml")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput()
		return string(out), err
	}
	out, err := check(queries)
	if err == nil {
		return nil
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("promtool: %v\n%s", err, out)
	}
	failed := map[string]bool{}
	for _, q := range queries {
		if out, err := check([]dashboardQuery{q}); err != nil {
			failed[q.record] = true
			t.Errorf("%s: promtool rejects the query:\n%s\n%s", q.where, q.expr, out)
		}
	}
	if len(failed) == 0 {
		t.Errorf("promtool rejects the queries together but none alone:\n%s", out)
	}
	return failed
}

// startDashboardSheba starts sheba with every optional part whose metrics
// the dashboard shows, makes a few calls, and returns the metric names of
// its /metrics (a histogram's _bucket, _sum and _count, a summary's own
// name, _sum and _count) with the labels each carries.
func startDashboardSheba(t *testing.T) map[string]map[string]bool {
	t.Helper()
	hook := startHookServer(t, "tcp")
	redis := redistest.Start(t)
	e := newTestEnv(t, withHook(hook.url), func(c *config.Config) {
		c.Redis.URL, c.Redis.Timeout = redis.URL(), time.Second
	})
	if _, err := e.ping.Ping(t.Context(), &shebav1.PingRequest{}); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	e.newAccount(t, "dana")
	e.getAccountGRPC(t.Context())
	_, _ = shebav1.NewAccountServiceClient(e.anon).GetAccount(t.Context(), &shebav1.GetAccountRequest{AccountId: unknownID})
	if calls, _ := hook.calls(); len(calls) == 0 {
		t.Fatal("the hook was not called")
	}

	live := map[string]map[string]bool{}
	add := func(name string, labels map[string]bool, extra ...string) {
		set := maps.Clone(labels)
		for _, l := range extra {
			set[l] = true
		}
		live[name] = set
	}
	for name, f := range e.scrape(t) {
		labels := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			add(name+"_bucket", labels, "le")
			add(name+"_sum", labels)
			add(name+"_count", labels)
		case dto.MetricType_SUMMARY:
			add(name, labels, "quantile")
			add(name+"_sum", labels)
			add(name+"_count", labels)
		default:
			add(name, labels)
		}
	}
	return live
}

// recordedMetrics returns the names the recording rules of
// deploy/prometheus/rules.yaml record, with their expressions.
func recordedMetrics(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct{ Record, Expr string }
		}
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	recorded := map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = r.Expr
			}
		}
	}
	return recorded
}

// markUsed notes that the dashboard shows metric, and, if a rule records
// it, the metrics the rule reads.
func markUsed(t *testing.T, used map[string]bool, recorded map[string]string, metric string) {
	t.Helper()
	if used[metric] {
		return
	}
	used[metric] = true
	expr, ok := recorded[metric]
	if !ok {
		return
	}
	refs, err := readPromQL(expr)
	if err != nil {
		t.Errorf("%s: the rule recording %s: %v", rulesFile, metric, err)
		return
	}
	for _, s := range refs.selectors {
		markUsed(t, used, recorded, s.metric)
	}
}

// legendLabel is a label in a legend: {{name}}.
var legendLabel = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

// queryProblems says what is wrong with the metrics and labels q reads:
// a metric neither live nor recorded, a matcher on a label its metric
// lacks, a grouping or legend label that none of its live metrics
// carries (unchecked when it reads a recorded metric, whose labels are
// the rule's).
func queryProblems(q dashboardQuery, refs promqlRefs, live map[string]map[string]bool, recorded map[string]string) []string {
	var problems []string
	if len(refs.selectors) == 0 {
		problems = append(problems, "reads no metric")
	}
	carried := maps.Clone(targetLabels)
	labelsKnown := true
	for _, s := range refs.selectors {
		labels, ok := live[s.metric]
		switch {
		case ok:
			for _, l := range s.labels {
				if !labels[l] {
					problems = append(problems, fmt.Sprintf("%s has no label %s", s.metric, l))
				}
			}
			maps.Copy(carried, labels)
		case recorded[s.metric] != "":
			labelsKnown = false
		default:
			problems = append(problems, fmt.Sprintf("%s is not on the /metrics of a live sheba, nor recorded in %s", s.metric, filepath.Base(rulesFile)))
		}
	}
	if !labelsKnown {
		return problems
	}
	want := slices.Clone(refs.grouping)
	for _, m := range legendLabel.FindAllStringSubmatch(q.legend, -1) {
		want = append(want, m[1])
	}
	if q.label != "" {
		want = append(want, q.label)
	}
	for _, l := range want {
		if !carried[l] {
			problems = append(problems, fmt.Sprintf("label %s is on none of the metrics it reads", l))
		}
	}
	return problems
}

// streamSeries are the input of TestDashboardLeavesStreamsOut, in
// promtool's notation, one sample a minute: GetAccount answers 1000 calls a
// minute throughout, 1 Internal, 1 slower than 500 ms; from minute 30 on,
// 100 StreamEvents streams a minute also end, UNAVAILABLE (after
// events.max_duration, or at shutdown), each open for minutes. sheba counts
// a stream in grpc_server_started_total at its opening, and once at its end
// in sheba_requests_total and grpc_server_handling_seconds, with grpc_type
// "server_stream" (its messages, in grpc_server_msg_sent_total, are not read
// by these panels). Here as many open as end each minute, the steady state;
// the series are absent before minute 30 (in truth shown at 0 for every
// method from the start), so that the streams arrive.
var streamSeries = map[string]string{
	`sheba_requests_total{job="sheba",instance="a",method="/sheba.v1.AccountService/GetAccount",code="OK",api_key_id="k"}`:                                              "0+999x60",
	`sheba_requests_total{job="sheba",instance="a",method="/sheba.v1.AccountService/GetAccount",code="Internal",api_key_id="k"}`:                                        "0+1x60",
	`grpc_server_started_total{job="sheba",instance="a",grpc_type="unary",grpc_service="sheba.v1.AccountService",grpc_method="GetAccount"}`:                             "0+1000x60",
	`grpc_server_handling_seconds_bucket{job="sheba",instance="a",grpc_type="unary",grpc_service="sheba.v1.AccountService",grpc_method="GetAccount",le="0.1"}`:          "0+500x60",
	`grpc_server_handling_seconds_bucket{job="sheba",instance="a",grpc_type="unary",grpc_service="sheba.v1.AccountService",grpc_method="GetAccount",le="0.5"}`:          "0+999x60",
	`grpc_server_handling_seconds_bucket{job="sheba",instance="a",grpc_type="unary",grpc_service="sheba.v1.AccountService",grpc_method="GetAccount",le="+Inf"}`:         "0+1000x60",
	`grpc_server_handling_seconds_count{job="sheba",instance="a",grpc_type="unary",grpc_service="sheba.v1.AccountService",grpc_method="GetAccount"}`:                    "0+1000x60",
	`sheba_requests_total{job="sheba",instance="a",method="/sheba.v1.EventService/StreamEvents",code="Unavailable",api_key_id="k"}`:                                     "_x30 0+100x30",
	`grpc_server_started_total{job="sheba",instance="a",grpc_type="server_stream",grpc_service="sheba.v1.EventService",grpc_method="StreamEvents"}`:                     "_x30 0+100x30",
	`grpc_server_handling_seconds_bucket{job="sheba",instance="a",grpc_type="server_stream",grpc_service="sheba.v1.EventService",grpc_method="StreamEvents",le="0.1"}`:  "_x30 0x30",
	`grpc_server_handling_seconds_bucket{job="sheba",instance="a",grpc_type="server_stream",grpc_service="sheba.v1.EventService",grpc_method="StreamEvents",le="0.5"}`:  "_x30 0x30",
	`grpc_server_handling_seconds_bucket{job="sheba",instance="a",grpc_type="server_stream",grpc_service="sheba.v1.EventService",grpc_method="StreamEvents",le="+Inf"}`: "_x30 0+100x30",
	`grpc_server_handling_seconds_count{job="sheba",instance="a",grpc_type="server_stream",grpc_service="sheba.v1.EventService",grpc_method="StreamEvents"}`:            "_x30 0+100x30",
}

// TestDashboardLeavesStreamsOut checks that the dashboard's panels of
// calls (every query reading sheba_requests_total or
// grpc_server_handling_seconds) leave event streams out, as the SLO rules
// do (docs/alerts.md, streams are not calls): with streams ending
// UNAVAILABLE after minutes of being open, each such query answers at
// minute 55 exactly what it answered at minute 25, before any stream, and
// not nothing. promtool evaluates the queries (written as recording rules)
// over streamSeries.
func TestDashboardLeavesStreamsOut(t *testing.T) {
	t.Parallel()
	promtool := promtoolPath(t)
	_, d := readDashboard(t)
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	type exprTest struct {
		Expr       string `yaml:"expr"`
		EvalTime   string `yaml:"eval_time"`
		ExpSamples []any  `yaml:"exp_samples"`
	}
	var rules []rule
	var tests []exprTest
	for _, q := range dashboardQueries(t, d) {
		if strings.HasPrefix(q.record, "variable_") {
			continue
		}
		refs, err := readPromQL(q.expr)
		if err != nil {
			t.Fatalf("%s: %v", q.where, err)
		}
		calls := false
		for _, s := range refs.selectors {
			calls = calls || s.metric == "sheba_requests_total" || strings.HasPrefix(s.metric, "grpc_server_handling_seconds")
		}
		if !calls {
			continue
		}
		rules = append(rules, rule{q.record, q.expr})
		// Empty when the query answers at 55m the same series with the
		// same values as at 25m, and answered something then.
		r := q.record
		tests = append(tests, exprTest{
			Expr:       fmt.Sprintf("(%[1]s != bool %[1]s offset 30m) == 1 or (%[1]s unless %[1]s offset 30m) or absent(%[1]s offset 30m)", r),
			EvalTime:   "55m",
			ExpSamples: []any{},
		})
	}
	if len(rules) < 6 {
		t.Fatalf("%d panel queries read sheba_requests_total or grpc_server_handling_seconds, want the 6 panels of calls at least", len(rules))
	}
	var input []map[string]string
	for s, v := range streamSeries {
		input = append(input, map[string]string{"series": s, "values": v})
	}
	dir := t.TempDir()
	write := func(name string, v any) {
		b, err := yaml.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("panels.rules.yaml", map[string]any{"groups": []map[string]any{{"name": "panels", "rules": rules}}})
	write("panels_test.yaml", map[string]any{
		"rule_files":          []string{"panels.rules.yaml"},
		"evaluation_interval": "1m",
		"tests": []map[string]any{{
			"interval":         "1m",
			"input_series":     input,
			"promql_expr_test": tests,
		}},
	})
	cmd := exec.Command(promtool, "test", "rules", "panels_test.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("a panel of calls changes when event streams end (its query differs at 55m from 25m, or answers nothing):\n%s", out)
	}
}

// promtoolPath returns the path of promtool, which make test installs.
func promtoolPath(t *testing.T) string {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found (make test installs it; Debian: apt-get install prometheus): %v", err)
	}
	return promtool
}

// readDashboard returns the dashboard's JSON, and its panels decoded.
func readDashboard(t *testing.T) ([]byte, grafanaDashboard) {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return raw, d
}
