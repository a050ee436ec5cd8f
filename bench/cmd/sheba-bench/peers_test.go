package main

import (
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseOptionsPeerRows(t *testing.T) {
	o, err := parseOptions([]string{"-scenario", "peer-rest,peer-grpc"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"peer-rest/kratos", "peer-rest/gozero", "peer-rest/gateway", "peer-grpc/kratos", "peer-grpc/gozero", "peer-grpc/gateway"}
	if diff := cmp.Diff(want, o.scenarios); diff != "" {
		t.Errorf("-scenario peer-rest,peer-grpc (-want +got):\n%s", diff)
	}
	if o, err = parseOptions([]string{"-scenario", "ping-rest,peer-grpc/gozero"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"ping-rest", "peer-grpc/gozero"}, o.scenarios); diff != "" {
		t.Errorf("-scenario ping-rest,peer-grpc/gozero (-want +got):\n%s", diff)
	}
	// A full run has every peer row.
	o, _ = parseOptions(nil, io.Discard)
	for _, n := range want {
		if !strings.Contains(strings.Join(o.scenarios, ","), n) {
			t.Errorf("default scenarios %q: no %s", o.scenarios, n)
		}
	}
}

// Issue 34's goals: ping-rest at most 0.9 of the cheapest peer's CPU per
// request (moonshot 0.75), ping-grpc at most 0.95 (0.85); each peer row
// carries its group's.
func TestPeerGoals(t *testing.T) {
	for group, want := range map[string]goal{
		"peer-rest": {Measure: measureCPU, Bound: 0.9, Moonshot: 0.75},
		"peer-grpc": {Measure: measureCPU, Bound: 0.95, Moonshot: 0.85},
	} {
		for _, row := range scenarioGroups[group] {
			if got, ok := goals[row]; !ok || got != want {
				t.Errorf("goals[%q] = %+v, %v; want %+v", row, got, ok, want)
			}
		}
	}
}

func TestPeerScenarios(t *testing.T) {
	b := &bench{opts: options{conc: 50}, peerVersions: map[string]string{"kratos": "v2.8.3", "gozero": "v1.10.3", "gateway": "v2.34.0"}}
	none := func(*server) load { return nil }
	var names []string
	for _, s := range b.peerScenarios(none, none) {
		names = append(names, s.name)
		if s.a.server != srvSheba {
			t.Errorf("%s: A is %q, want sheba", s.name, s.a.server)
		}
		p, ok := peerByServer(s.b.server)
		if !ok || !strings.HasSuffix(s.name, "/"+p.key) {
			t.Errorf("%s: B is %q, not the row's peer", s.name, s.b.server)
		}
		if !strings.HasSuffix(s.b.label, " "+b.peerVersions[p.key]) {
			t.Errorf("%s: B's label %q does not name its version %s", s.name, s.b.label, b.peerVersions[p.key])
		}
	}
	if diff := cmp.Diff(peerScenarioNames, names); diff != "" {
		t.Errorf("peer rows (-want +got):\n%s", diff)
	}
}

func TestCheapestPeerNotes(t *testing.T) {
	row := func(name, label string, sheba, peer []float64) scenarioReport {
		s := pairRow(name, sheba, []float64{1, 1, 1}, peer, []float64{1, 1, 1})
		s.Sides[1].Label = label
		return s
	}
	rep := report{Scenarios: []scenarioReport{
		row("ping-rest", "net/http", []float64{40, 40, 40}, []float64{20, 20, 20}),
		row("peer-rest/kratos", "Kratos v2.8.3", []float64{40, 42, 41}, []float64{38, 38, 38}),
		row("peer-rest/gozero", "go-zero v1.10.3", []float64{40, 40, 40}, []float64{40, 40, 40}),
		row("peer-rest/gateway", "grpc-gateway", []float64{40, 40, 40}, []float64{80, 80, 80}),
		row("peer-grpc/kratos", "Kratos v2.8.3", []float64{20, 20, 20}, []float64{25, 25, 25}),
	}}
	for i := range rep.Scenarios {
		if g, ok := goals[rep.Scenarios[i].Name]; ok {
			rep.Scenarios[i].Goal = &g
		}
	}
	got := cheapestPeerNotes(rep)
	want := []string{
		"peer-rest: the cheapest peer is Kratos v2.8.3 at 38 µs CPU/req, sheba at 41 µs in its row: 1.08× (1.05–1.11); goal ≤ 0.90 ✗ (moonshot ≤ 0.75 ✗)",
		"peer-grpc: the cheapest peer is Kratos v2.8.3 at 25 µs CPU/req, sheba at 20 µs in its row: 0.80× (0.80–0.80); goal ≤ 0.95 ✓ (moonshot ≤ 0.85 ✓)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cheapestPeerNotes (-want +got):\n%s", diff)
	}
	if table := renderTable(rep); !strings.Contains(table, "- "+want[0]+"\n") {
		t.Errorf("the table's notes have no %q:\n%s", want[0], table)
	}
}
