package main

import (
	"io"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/shebasvc/sheba/config"
)

// standbyRow is a measured get-subscription-standby row of two pairs:
// with read_url, the primary spends 10 and 20 µs a lookup, without 100 µs.
func standbyRow() scenarioReport {
	run := func(sheba, primary, standby float64) result {
		split := cpuSplit{ProcessSec: sheba * 1e-3, PrimarySec: primary * 1e-3, StandbySec: standby * 1e-3}
		return result{RPS: 200, Requests: 1000, CPUServerSec: split.ProcessSec + split.PrimarySec + split.StandbySec, CPUSplit: &split}
	}
	sr := scenarioReport{Name: scenGetSubscriptionStandby, Sides: []sideReport{
		{Label: "sheba read_url=standby", Expect: []string{"200"}, Runs: []result{run(150, 10, 90), run(160, 20, 80)}},
		{Label: "sheba primary alone", Expect: []string{"200"}, Runs: []result{run(140, 100, 1), run(150, 100, 1)}},
	}}
	sr.summarize()
	return sr
}

func TestStandbyFigures(t *testing.T) {
	sr := standbyRow()
	sr.Figures = scenario{standby: true}.figures(sr)
	var got []string
	for _, f := range sr.Figures {
		got = append(got, f.String())
	}
	want := []string{
		"primary CPU/lookup ratio 0.15 (goal ≤ 0.20 ✓)",
		"primary CPU/lookup with read_url 15 µs", "alone 100 µs",
		"standby CPU/lookup with read_url 85 µs",
		"sheba CPU/req with read_url 155 µs", "on the primary alone 145 µs",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("figures (-want +got):\n%s", diff)
	}
	// CPU srv counts all three: the medians of 250 and 260 µs, of 241
	// and 251.
	if a, b := sr.Sides[0].Summary.CPUPerReqUS, sr.Sides[1].Summary.CPUPerReqUS; math.Abs(a-255) > 1e-6 || math.Abs(b-246) > 1e-6 {
		t.Errorf("CPU/req %v and %v µs, want 255 and 246", a, b)
	}

	// The row's goal is one of its figures: the table's goal cell shows it.
	rep := report{Scenarios: []scenarioReport{sr}}
	rep.judgeAll()
	if rep.Scenarios[0].Goal != nil {
		t.Errorf("goal %+v, want none from goals: the row is judged on its figure", rep.Scenarios[0].Goal)
	}
	table := renderTable(rep)
	if want := "| primary CPU/lookup ratio 0.15 (goal ≤ 0.20 ✓) |\n"; !strings.Contains(table, want) {
		t.Errorf("table lacks the goal cell %q:\n%s", want, table)
	}

	// Runs without the split (a results file of another row) give none.
	sr.Sides[0].Runs[0].CPUSplit, sr.Sides[0].Runs[1].CPUSplit = nil, nil
	if fs := standbyFigures(sr); fs != nil {
		t.Errorf("figures of runs without a CPU split: %v, want none", fs)
	}
}

// TestStandbyEnv loads sheba-standby's environment with sheba's own loader:
// database.read_url is the standby's URL.
func TestStandbyEnv(t *testing.T) {
	const standby = "postgres://postgres@127.0.0.1:5433/sheba?sslmode=disable"
	env := map[string]string{
		"DATABASE_URL":            "postgres://postgres@127.0.0.1:5432/sheba?sslmode=disable",
		"SHEBA_DATABASE_READ_URL": standby,
	}
	cfg, err := config.Load("", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("config.Load: %v", err)
	}
	if cfg.Database.ReadURL != standby {
		t.Errorf("database.read_url %q, want %q", cfg.Database.ReadURL, standby)
	}
}

func TestParseOptionsStandbyRows(t *testing.T) {
	o, err := parseOptions([]string{"-scenario", "get-subscription-standby,failover"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{scenGetSubscriptionStandby, scenFailover}, o.scenarios); diff != "" {
		t.Errorf("scenarios (-want +got):\n%s", diff)
	}
	// Every scenario runs by default, failover just before the event rows.
	o, _ = parseOptions(nil, io.Discard)
	n := len(o.scenarios) - len(eventScenarios)
	if !slices.Contains(o.scenarios, scenGetSubscriptionStandby) || o.scenarios[n-1] != scenFailover || !slices.Equal(o.scenarios[n:], eventScenarios) {
		t.Errorf("default scenarios %q, want get-subscription-standby among them, then failover and the event rows last", o.scenarios)
	}
}
