package main

// The goals the rows are judged on, the ratio each is judged by, and the
// rerun of a noisy row (bench/README.md, "Goals and reruns").

import (
	"fmt"
	"math"
	"slices"
)

// The measures a goal can bound.
const (
	// measureCPU is sheba's server CPU time per request over the
	// baseline's: what a call costs, lower is better.
	measureCPU = "cpu_per_req"
	// measureRate is sheba's req/s (goodput for an overload row) over the
	// baseline's: higher is better.
	measureRate = "rate"
)

// goal is what a scenario's row is judged on.
type goal struct {
	// Measure is measureCPU (the ratio must stay at most Bound) or
	// measureRate (at least Bound).
	Measure  string  `json:"measure"`
	Bound    float64 `json:"bound"`
	Moonshot float64 `json:"moonshot,omitempty"`
	// Of, when set, names the scenario whose sheba side is the baseline,
	// rather than this row's B: error-rest's goal is against ping-rest.
	Of string `json:"of,omitempty"`
}

// goals are the rows' goals by scenario: issue 23's as CPU per request (its
// "≥ 0.75× the baseline's speed" is at most 1/0.75 of its CPU), the hook
// rows' (issue 22) as throughput. A scenario without one is measured and
// drawn, not judged.
var goals = map[string]goal{
	// ping-rest's bound is issue 34's (issue 23's was 2).
	"ping-rest":              {Measure: measureCPU, Bound: 1.8, Moonshot: 1.5},
	"ping-grpc":              {Measure: measureCPU, Bound: 1.5, Moonshot: 1.2},
	"error-rest":             {Measure: measureCPU, Bound: 1 / 0.95, Of: "ping-rest"},
	"get-subscription":       {Measure: measureCPU, Bound: 1 / 0.75},
	"ping-rest-traced":       {Measure: measureCPU, Bound: 1 / 0.85, Of: "ping-rest"},
	"hook-echo":              {Measure: measureRate, Bound: 0.75, Moonshot: 0.85},
	"hook-echo-unix":         {Measure: measureRate, Bound: 0.75, Moonshot: 0.85},
	"hook-echo-h2c":          {Measure: measureRate, Bound: 0.75, Moonshot: 0.85},
	"hook-echo-subscription": {Measure: measureRate, Bound: 0.75, Moonshot: 0.85},
	"hook-cached":            {Measure: measureRate, Bound: 0.95},
	"hook-ext-authz":         {Measure: measureRate, Bound: 0.75},
	// Issue 25's: the browser protocols' CPU per request against
	// ping-rest's on the same sheba (the row's B).
	"ping-connect-json":  {Measure: measureCPU, Bound: 1.3},
	"ping-connect-proto": {Measure: measureCPU, Bound: 1.1},
	"ping-grpc-web":      {Measure: measureCPU, Bound: 1.1},
	// Issue 34's: sheba's ping at most 0.9 (REST) and 0.95 (gRPC) of the
	// cheapest peer's CPU per request. Within a bound of the cheapest peer
	// is within it of every peer, so each peer row has the group's goal,
	// and the group meets it when all its rows do (the note under the
	// table names the cheapest: cheapestPeerNotes).
	"peer-rest/kratos":  {Measure: measureCPU, Bound: 0.9, Moonshot: 0.75},
	"peer-rest/gozero":  {Measure: measureCPU, Bound: 0.9, Moonshot: 0.75},
	"peer-rest/gateway": {Measure: measureCPU, Bound: 0.9, Moonshot: 0.75},
	"peer-grpc/kratos":  {Measure: measureCPU, Bound: 0.95, Moonshot: 0.85},
	"peer-grpc/gozero":  {Measure: measureCPU, Bound: 0.95, Moonshot: 0.85},
	"peer-grpc/gateway": {Measure: measureCPU, Bound: 0.95, Moonshot: 0.85},
}

// goalOf is s's goal: the one its JSON recorded, else the table's (results
// written before goals were recorded).
func goalOf(s scenarioReport) (goal, bool) {
	if s.Goal != nil {
		return *s.Goal, true
	}
	g, ok := goals[s.Name]
	return g, ok
}

// primaryMeasure is the ratio a row leads with and is checked for noise
// on: its goal's measure, else CPU per request, except for an overload row
// (goodput is its point, and the shed requests cost next to nothing).
func primaryMeasure(s scenarioReport) string {
	if g, ok := goalOf(s); ok {
		return g.Measure
	}
	if s.ByOK {
		return measureRate
	}
	return measureCPU
}

// pairRatios are s's own pair ratios of measure.
func (s scenarioReport) pairRatios(measure string) []float64 {
	if measure == measureRate {
		return s.Ratios
	}
	return s.CPURatios
}

// verdict is a row's judged ratio: the pair ratios (or, against another
// scenario, the ratios of every run to every run of it), their median, and
// whether it meets its goal and moonshot.
type verdict struct {
	label   string // what is compared, for the chart
	measure string
	ratios  []float64
	ratio   float64
	goal    *goal
	// met and moonshotMet are nil without a goal (or moonshot), or when
	// the scenario the goal is against is not in the run.
	met, moonshotMet *bool
}

// judge is s's verdict; byName holds the run's other rows, for a goal
// against one of them.
func judge(s scenarioReport, byName map[string]scenarioReport) verdict {
	m := primaryMeasure(s)
	v := verdict{label: s.Name, measure: m, ratios: s.pairRatios(m)}
	g, ok := goalOf(s)
	if !ok {
		v.ratio = median(v.ratios)
		return v
	}
	v.goal = &g
	if g.Of != "" {
		of, ok := byName[g.Of]
		if !ok || len(of.Sides) == 0 || len(s.Sides) == 0 {
			v.ratio = median(v.ratios)
			return v
		}
		v.label = s.Name + " ÷ " + g.Of
		value := cpuPerReq
		if m == measureRate {
			value = s.rate
		}
		v.ratios = crossRatios(s.Sides[0].Runs, of.Sides[0].Runs, value)
	}
	v.ratio = median(v.ratios)
	if len(v.ratios) == 0 {
		return v
	}
	v.met = boolPtr(g.meets(v.ratio, g.Bound))
	if g.Moonshot > 0 {
		v.moonshotMet = boolPtr(g.meets(v.ratio, g.Moonshot))
	}
	return v
}

// meets reports whether ratio is within bound, in g's direction.
func (g goal) meets(ratio, bound float64) bool {
	if g.Measure == measureRate {
		return ratio >= bound
	}
	return ratio <= bound
}

// sign is how a bound of g reads: ≤ for a cost, ≥ for a rate.
func (g goal) sign() string {
	if g.Measure == measureRate {
		return ">="
	}
	return "<="
}

// crossRatios are the ratios of value of every run of a to every run of b:
// the runs of two scenarios were not alternated, so no run pairs with one
// in particular.
func crossRatios(a, b []result, value func(result) float64) []float64 {
	var out []float64
	for _, ra := range a {
		for _, rb := range b {
			if x, y := value(ra), value(rb); x > 0 && y > 0 {
				out = append(out, x/y)
			}
		}
	}
	return out
}

// String is the table's goal cell: the bound and whether the ratio meets
// it, and for a goal against another row, the ratio itself.
func (v verdict) String() string {
	if v.goal == nil {
		return ""
	}
	g := v.goal
	sign := goalSigns[g.sign()]
	s := fmt.Sprintf("%s %.2f", sign, g.Bound)
	if g.Of != "" {
		what := "CPU/req"
		if v.measure == measureRate {
			what = "req/s"
		}
		s = fmt.Sprintf("%s of %s's %s", s, g.Of, what)
		if v.met == nil {
			return s + ": not in the run"
		}
		s = fmt.Sprintf("%s: %.2f (%s)", s, v.ratio, span(v.ratios))
	}
	if v.met == nil {
		return s
	}
	s += " " + mark(*v.met)
	if v.moonshotMet != nil {
		s += fmt.Sprintf(" (moonshot %s %.2f %s)", sign, g.Moonshot, mark(*v.moonshotMet))
	}
	return s
}

// mark is ✓ for a goal met, ✗ for one missed.
func mark(met bool) string {
	if met {
		return "✓"
	}
	return "✗"
}

// figures are v's goal and moonshot as figures, for the note under the
// table and the JSON.
func (v verdict) figures() []figure {
	if v.goal == nil || v.met == nil {
		return nil
	}
	name := "ratio"
	if v.measure == measureCPU {
		name = "CPU/req ratio"
	}
	if v.goal.Of != "" {
		name += " to " + v.goal.Of
	}
	out := []figure{goalFig(name, v.ratio, "", v.goal.sign(), v.goal.Bound)}
	if v.moonshotMet != nil {
		out = append(out, goalFig("moonshot", v.ratio, "", v.goal.sign(), v.goal.Moonshot))
	}
	return out
}

// judgeAll records each row's goal in it and puts the goal's figures first
// among its figures; the rows against another one need it in rep, so this
// runs once every row is measured.
func (rep *report) judgeAll() {
	byName := rep.rowsByName()
	for i := range rep.Scenarios {
		s := &rep.Scenarios[i]
		g, ok := goals[s.Name]
		if !ok || len(s.Sides) != 2 {
			continue
		}
		s.Goal = &g
		s.Figures = append(judge(*s, byName).figures(), s.Figures...)
	}
}

// rowsByName are rep's measured rows by scenario name.
func (rep report) rowsByName() map[string]scenarioReport {
	out := map[string]scenarioReport{}
	for _, s := range rep.Scenarios {
		if s.Unavailable == "" && len(s.Sides) == 2 {
			out[s.Name] = s
		}
	}
	return out
}

// maxSpread is -spread's default: a row whose pair ratios spread more than
// this (pairSpread) is measured again.
const maxSpread = 0.15

// pairSpread is how far apart the pair ratios xs are: the highest over the
// lowest, less one (0.15: the highest is 15% above the lowest). It is 0
// for fewer than two ratios, +Inf when one is not positive.
func pairSpread(xs []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	lo, hi := slices.Min(xs), slices.Max(xs)
	if lo <= 0 {
		return math.Inf(1)
	}
	return hi/lo - 1
}

// needsRerun reports whether a row of pair ratios xs is measured again:
// their spread is over limit (0: never). One pair has no spread.
func needsRerun(xs []float64, limit float64) bool {
	return limit > 0 && pairSpread(xs) > limit
}

// rerunFor is the rerun sr needs after its first pairs pairs with -spread
// limit: nil when the pair ratios of its primary measure spread at most
// limit.
func rerunFor(sr scenarioReport, pairs int, limit float64) *rerunReport {
	first := sr.pairRatios(primaryMeasure(sr))
	if !needsRerun(first, limit) {
		return nil
	}
	return &rerunReport{Spread: pairSpread(first), Limit: limit, FirstPairs: pairs, FirstRatios: first, Pairs: rerunPairs(pairs)}
}

// rerunPairs is how many pairs a rerun has: twice the first attempt's,
// within -pairs' bound.
func rerunPairs(pairs int) int {
	return min(2*pairs, maxPairs)
}

// maxPairs bounds -pairs.
const maxPairs = 50

// rerunReport says why a row was measured again; the row's sides and
// ratios are those of the rerun.
type rerunReport struct {
	// Spread is pairSpread of the first attempt's FirstRatios (its primary
	// measure), over Limit.
	Spread      float64   `json:"spread"`
	Limit       float64   `json:"limit"`
	FirstPairs  int       `json:"first_pairs"`
	FirstRatios []float64 `json:"first_ratios"`
	Pairs       int       `json:"pairs"`
}

func (r rerunReport) String() string {
	return fmt.Sprintf("rerun with %d pairs: the first %d spread %.0f%%", r.Pairs, r.FirstPairs, r.Spread*100)
}

func boolPtr(b bool) *bool { return &b }
