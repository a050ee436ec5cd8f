package main

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// pairRow is a measured row named name: pair i ran sheba at cpuA[i] µs of
// server CPU a request and rpsA[i] req/s, the baseline at cpuB[i] and
// rpsB[i].
func pairRow(name string, cpuA, rpsA, cpuB, rpsB []float64) scenarioReport {
	runs := func(cpu, rps []float64) []result {
		var out []result
		for i := range cpu {
			out = append(out, result{Requests: 1000, CPUServerSec: cpu[i] * 1e-3, CPUServer: 1, RPS: rps[i], OKPerSec: rps[i]})
		}
		return out
	}
	s := scenarioReport{Name: name, Sides: []sideReport{
		{Label: "sheba", Runs: runs(cpuA, rpsA)},
		{Label: "base", Runs: runs(cpuB, rpsB)},
	}}
	s.summarize()
	return s
}

func TestPairSpread(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{2}, 0},
		{[]float64{2, 2.3, 2.1}, 0.15},
		{[]float64{0.5, 1}, 1},
		{[]float64{0, 1}, math.Inf(1)},
	} {
		if got := pairSpread(tc.in); math.Abs(got-tc.want) > 1e-9 && got != tc.want {
			t.Errorf("pairSpread(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestNeedsRerun(t *testing.T) {
	for _, tc := range []struct {
		in    []float64
		limit float64
		want  bool
	}{
		{[]float64{2, 2.2, 2.1}, 0.15, false}, // 10%
		{[]float64{2, 2.4, 2.1}, 0.15, true},  // 20%
		{[]float64{2, 2.4, 2.1}, 0.25, false},
		{[]float64{2, 2.4, 2.1}, 0, false}, // -spread 0: never
		{[]float64{2}, 0.15, false},        // one pair has no spread
	} {
		if got := needsRerun(tc.in, tc.limit); got != tc.want {
			t.Errorf("needsRerun(%v, %v) = %v, want %v", tc.in, tc.limit, got, tc.want)
		}
	}
	if got := rerunPairs(3); got != 6 {
		t.Errorf("rerunPairs(3) = %d, want 6", got)
	}
	if got := rerunPairs(40); got != maxPairs {
		t.Errorf("rerunPairs(40) = %d, want the bound %d", got, maxPairs)
	}
}

func TestRerunFor(t *testing.T) {
	// CPU ratios 2, 2.5, 2.2 (25% apart); req/s ratios 0.5 all three.
	noisyCPU := pairRow("ping-rest", []float64{20, 25, 22}, []float64{5, 5, 5}, []float64{10, 10, 10}, []float64{10, 10, 10})
	rr := rerunFor(noisyCPU, 3, 0.15)
	want := &rerunReport{Spread: 0.25, Limit: 0.15, FirstPairs: 3, FirstRatios: []float64{2, 2.5, 2.2}, Pairs: 6}
	if diff := cmp.Diff(want, rr, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("rerunFor(ping-rest, CPU ratios 25%% apart) (-want +got):\n%s", diff)
	}
	if noisyCPU.Spread < 0.2499 || noisyCPU.Spread > 0.2501 {
		t.Errorf("summarize: spread %v, want 0.25", noisyCPU.Spread)
	}
	if rr := rerunFor(noisyCPU, 3, 0.3); rr != nil {
		t.Errorf("rerunFor at -spread 0.3 = %+v, want none", rr)
	}
	// hook-echo is judged by req/s: its CPU ratios' spread does not count,
	// its req/s ratios' does.
	hook := pairRow("hook-echo", []float64{20, 25, 22}, []float64{5, 5, 5}, []float64{10, 10, 10}, []float64{10, 10, 10})
	if rr := rerunFor(hook, 3, 0.15); rr != nil {
		t.Errorf("rerunFor(hook-echo, steady req/s) = %+v, want none", rr)
	}
	hook = pairRow("hook-echo", []float64{20, 20}, []float64{4, 5}, []float64{10, 10}, []float64{10, 10})
	if rr := rerunFor(hook, 2, 0.15); rr == nil || rr.Pairs != 4 || math.Abs(rr.Spread-0.25) > 1e-9 {
		t.Errorf("rerunFor(hook-echo, req/s ratios 0.4 and 0.5) = %+v, want a rerun of 4 pairs at spread 0.25", rr)
	}
}

func TestJudge(t *testing.T) {
	ping := pairRow("ping-rest", []float64{30, 32, 28}, []float64{5, 5, 5}, []float64{20, 20, 20}, []float64{10, 10, 10})
	errRow := pairRow("error-rest", []float64{30, 33, 36}, []float64{5, 5, 5}, []float64{20, 20, 20}, []float64{10, 10, 10})
	readyz := pairRow("readyz", []float64{10, 10, 10}, []float64{5, 5, 5}, []float64{20, 20, 20}, []float64{10, 10, 10})
	rep := report{Scenarios: []scenarioReport{ping, errRow, readyz}}
	byName := rep.rowsByName()

	v := judge(ping, byName)
	if math.Abs(v.ratio-1.5) > 1e-9 || v.met == nil || !*v.met || v.moonshotMet == nil || !*v.moonshotMet {
		t.Errorf("ping-rest: ratio %v, %q; want 1.5, goal ≤ 1.8 and moonshot ≤ 1.5 met", v.ratio, v)
	}
	if got, want := v.String(), "≤ 1.80 ✓ (moonshot ≤ 1.50 ✓)"; got != want {
		t.Errorf("ping-rest goal cell %q, want %q", got, want)
	}
	// error-rest against ping-rest: every run against every run, median 33/30 = 1.1.
	v = judge(errRow, byName)
	if v.label != "error-rest ÷ ping-rest" || len(v.ratios) != 9 || math.Abs(v.ratio-1.1) > 1e-9 || v.met == nil || *v.met {
		t.Errorf("error-rest: %q, ratios %v; want 9 of median 1.1 against ping-rest, goal ≤ 1.05 missed", v.label, v.ratios)
	}
	if got, want := v.String(), "≤ 1.05 of ping-rest's CPU/req: 1.10 (0.94–1.29) ✗"; got != want {
		t.Errorf("error-rest goal cell %q, want %q", got, want)
	}
	// Without ping-rest in the run, error-rest cannot be judged.
	v = judge(errRow, map[string]scenarioReport{})
	if v.met != nil || v.String() != "≤ 1.05 of ping-rest's CPU/req: not in the run" {
		t.Errorf("error-rest alone: %q, want it not judged", v)
	}
	if v := judge(readyz, byName); v.goal != nil || v.String() != "" || math.Abs(v.ratio-0.5) > 1e-9 {
		t.Errorf("readyz: ratio %v, goal %+v; want no goal and its CPU ratio 0.5", v.ratio, v.goal)
	}

	rep.judgeAll()
	if g := rep.Scenarios[0].Goal; g == nil || *g != goals["ping-rest"] {
		t.Errorf("judgeAll: ping-rest's goal %+v, want the table's", g)
	}
	var figs []string
	for _, f := range rep.Scenarios[1].Figures {
		figs = append(figs, f.String())
	}
	if diff := cmp.Diff([]string{"CPU/req ratio to ping-rest 1.10 (goal ≤ 1.05 ✗)"}, figs); diff != "" {
		t.Errorf("error-rest figures (-want +got):\n%s", diff)
	}
}

// chartReport is a run with a row of each kind the chart draws or leaves
// out.
func chartReport() report {
	ping := pairRow("ping-rest", []float64{30, 36, 28}, []float64{5, 5, 5}, []float64{10, 10, 10}, []float64{10, 10, 10}) // 3×: missed
	ping.Rerun = &rerunReport{Spread: 0.2, Limit: 0.15, FirstPairs: 3, Pairs: 6}
	grpc := pairRow("ping-grpc", []float64{14, 14, 14}, []float64{5, 5, 5}, []float64{10, 10, 10}, []float64{10, 10, 10}) // 1.4×: met, moonshot missed
	readyz := pairRow("readyz", []float64{5, 5, 5}, []float64{5, 5, 5}, []float64{10, 10, 10}, []float64{10, 10, 10})     // 0.5×, no goal
	hook := pairRow("hook-echo", []float64{20, 20, 20}, []float64{5, 4, 5}, []float64{10, 10, 10}, []float64{10, 10, 10}) // req/s 0.5: 2×
	login := pairRow("login-overload", []float64{1, 1, 1}, []float64{5, 5, 5}, []float64{10, 10, 10}, []float64{10, 10, 10})
	login.ByOK = true
	return report{
		Started: time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC),
		Machine: machine{Cores: 2, CPUModel: "Test CPU", GoVersion: "go1.26", ShebaCommit: "abc1234"},
		Options: map[string]any{"pairs": 3, "duration": "5s"},
		Scenarios: []scenarioReport{ping, grpc, readyz, hook, login,
			{Name: "ping-rest-traced", Unavailable: "n/a (tracing not built yet)"}},
	}
}

func TestChartRows(t *testing.T) {
	rows, left := chartRows(chartReport())
	want := []chartRow{
		{name: "ping-rest", caption: "CPU/req over base", ratio: 3, lo: 2.8, hi: 3.6, goal: 1.8, moonshot: 1.5, met: boolPtr(false), rerun: true},
		{name: "ping-grpc", caption: "CPU/req over base", ratio: 1.4, lo: 1.4, hi: 1.4, goal: 1.5, moonshot: 1.2, met: boolPtr(true)},
		{name: "readyz", caption: "CPU/req over base", ratio: 0.5, lo: 0.5, hi: 0.5},
		// Judged by req/s (0.4–0.5, median 0.5): drawn inverted.
		{name: "hook-echo", caption: "1 ÷ req/s ratio over base", ratio: 2, lo: 2, hi: 2.5, goal: 1 / 0.75, moonshot: 1 / 0.85, met: boolPtr(false)},
	}
	if diff := cmp.Diff(want, rows, cmp.AllowUnexported(chartRow{}), cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("chartRows (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"login-overload"}, left); diff != "" {
		t.Errorf("rows left out (-want +got):\n%s", diff)
	}
}

// svgElement is an element of a drawn chart, with the attributes the
// tests read.
type svgElement struct {
	name, class, scenario string
	x, width, x1          float64
	text                  string
}

// parseSVG decodes svg as XML and returns its elements in order; the rows'
// elements carry the scenario of their group.
func parseSVG(t *testing.T, svg string) []svgElement {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(svg))
	var out []svgElement
	var stack []int // indexes into out of the open elements
	scenario := ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("chart is not XML: %v\n%s", err, svg)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			e := svgElement{name: tok.Name.Local}
			for _, a := range tok.Attr {
				switch a.Name.Local {
				case "class":
					e.class = a.Value
				case "data-scenario":
					scenario = a.Value
				case "x":
					e.x, _ = strconv.ParseFloat(a.Value, 64)
				case "width":
					e.width, _ = strconv.ParseFloat(a.Value, 64)
				case "x1":
					e.x1, _ = strconv.ParseFloat(a.Value, 64)
				}
			}
			e.scenario = scenario
			out = append(out, e)
			stack = append(stack, len(out)-1)
		case xml.CharData:
			if len(stack) > 0 {
				out[stack[len(stack)-1]].text += string(tok)
			}
		case xml.EndElement:
			stack = stack[:len(stack)-1]
			if tok.Name.Local == "g" {
				scenario = ""
			}
		}
	}
	return out
}

func TestRenderChart(t *testing.T) {
	rows, left := chartRows(chartReport())
	title, sub := chartTitles(chartReport())
	els := parseSVG(t, renderChart(title, sub, rows, left))

	classes := map[string][]string{} // class: the scenarios of its elements
	bars := map[string]svgElement{}
	var texts []string
	for _, e := range els {
		if e.class != "" {
			classes[e.class] = append(classes[e.class], e.scenario)
		}
		if strings.HasPrefix(e.class, "bar ") {
			bars[e.scenario] = e
		}
		texts = append(texts, e.text)
	}
	for class, want := range map[string][]string{
		"bar met":    {"ping-grpc"},
		"bar missed": {"ping-rest", "hook-echo"},
		"bar none":   {"readyz"},
		"goal":       {"ping-rest", "ping-grpc", "hook-echo"},
		"moonshot":   {"ping-rest", "ping-grpc", "hook-echo"},
		"whisker":    {"ping-rest", "ping-grpc", "readyz", "hook-echo"},
	} {
		if diff := cmp.Diff(want, classes[class]); diff != "" {
			t.Errorf("elements of class %q by scenario (-want +got):\n%s", class, diff)
		}
	}
	// The bars share one scale from the same origin: 3× is six times 0.5×.
	if p, r := bars["ping-rest"], bars["readyz"]; p.x != r.x || math.Abs(p.width/r.width-6) > 0.01 {
		t.Errorf("ping-rest bar at x %v width %v, readyz at x %v width %v: want one origin and 6× the width", p.x, p.width, r.x, r.width)
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{
		"abc1234", "2× Test CPU", "lower is better", "3.00× ‡", "1.40×", "0.50×",
		"1 ÷ req/s ratio over base", "Not drawn: login-overload",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("chart text lacks %q:\n%s", want, all)
		}
	}
}

// TestRedrawChart draws the chart of a results file as -chart does, and
// refuses a file without a row to draw.
func TestRedrawChart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "20261202T030000Z.json")
	data, err := json.Marshal(chartReport())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := run(t.Context(), []string{"-chart", path}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	svgPath := filepath.Join(dir, "20261202T030000Z.svg")
	if out.String() != "Chart: "+svgPath+"\n" {
		t.Errorf("output %q, want the chart's path", out.String())
	}
	svg, err := os.ReadFile(svgPath)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(svg), `class="bar `); n != 4 {
		t.Errorf("%d bars, want 4", n)
	}
	webhooks := filepath.Join(dir, "webhooks.json")
	if err := os.WriteFile(webhooks, []byte(`{"scenarios":null,"webhooks":[{"name":"webhook-plans"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(t.Context(), []string{"-chart", webhooks}, io.Discard, io.Discard); err == nil {
		t.Error("-chart of a webhook-only run: got no error")
	}
}

func TestRenderTableLeadsWithCPU(t *testing.T) {
	rep := chartReport()
	rep.judgeAll()
	table := renderTable(rep)
	for _, want := range []string{
		"| scenario | side (load) | CPU/req | req/s |",
		"| ping-rest ‡ rerun with 6 pairs: the first 3 spread 20% | sheba () | 30 µs | 5.00 |",
		"| **3.00** (2.80–3.60) | 0.50 (0.50–0.50) | ≤ 1.80 ✗ (moonshot ≤ 1.50 ✗) |",
		// hook-echo is judged by req/s: that ratio is the bold one.
		"| 2.00 (2.00–2.00) | **0.50** (0.40–0.50) | ≥ 0.75 ✗ (moonshot ≥ 0.85 ✗) |",
		"‡: the first pairs' ratios (the bold measure) spread more than 15%",
		"largest cost over a baseline: ping-rest at 3.00× the CPU per request of base",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}
