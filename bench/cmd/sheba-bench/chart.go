package main

// The chart of a run: one bar per row, sheba's cost over its baseline's,
// beside its goal (bench/README.md, "The chart"). Written with fmt: a
// dozen kinds of SVG element in fixed places need no chart library.

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
)

// chartRow is one bar: a row's cost per request over its baseline's
// (lower is better), the lowest and highest pair, and its goal.
type chartRow struct {
	name    string // the scenario, or "error-rest ÷ ping-rest"
	caption string // what the ratio compares
	ratio   float64
	lo, hi  float64
	// goal and moonshot are 0 when the row has none (or it could not be
	// judged); met is nil then.
	goal, moonshot float64
	met            *bool
	rerun          bool
}

// chartRows are rep's bars in the order of its rows, and the names of the
// rows left out: the overload rows, whose point is goodput rather than
// cost. A row judged by throughput is drawn as its inverse (the baseline's
// req/s over sheba's: the time a request takes on the saturated server CPU,
// the hook server's included), its goal too, so that every bar reads the
// same way.
func chartRows(rep report) (rows []chartRow, left []string) {
	byName := rep.rowsByName()
	for _, s := range rep.Scenarios {
		if _, ok := byName[s.Name]; !ok {
			continue
		}
		if s.ByOK {
			left = append(left, s.Name)
			continue
		}
		v := judge(s, byName)
		if len(v.ratios) == 0 {
			continue
		}
		r := chartRow{name: v.label, ratio: v.ratio, lo: slices.Min(v.ratios), hi: slices.Max(v.ratios), rerun: s.Rerun != nil}
		base := s.Sides[1].Label
		if v.goal != nil && v.goal.Of != "" && v.met != nil {
			base = "sheba's " + v.goal.Of
		}
		r.caption = "CPU/req over " + base
		invert := v.measure == measureRate
		if invert {
			r.caption = "1 ÷ req/s ratio over " + base
			r.ratio, r.lo, r.hi = 1/r.ratio, 1/r.hi, 1/r.lo
		}
		if v.met != nil {
			r.met = v.met
			r.goal, r.moonshot = v.goal.Bound, v.goal.Moonshot
			if invert {
				r.goal = 1 / r.goal
				if r.moonshot > 0 {
					r.moonshot = 1 / r.moonshot
				}
			}
		}
		rows = append(rows, r)
	}
	return rows, left
}

// The chart's layout, in pixels.
const (
	chartWidth  = 860
	chartLabelX = 270 // right edge of the labels
	chartPlotX0 = 280
	chartPlotX1 = chartWidth - 90 // room for the value beside a bar
	chartTop    = 64
	chartRowH   = 38
	chartBarH   = 16
)

// Colours of a bar whose goal is met, missed, or that has none.
const (
	colourMet    = "#2e7d32"
	colourMissed = "#c62828"
	colourNone   = "#90a4ae"
)

// renderChart draws rows as an SVG document: title and subtitle on top,
// the bars, an axis in multiples of the baseline's cost, and a legend that
// names left, the rows not drawn.
func renderChart(title, subtitle string, rows []chartRow, left []string) string {
	top := 1.0
	for _, r := range rows {
		top = max(top, r.hi, r.ratio, r.goal, r.moonshot)
	}
	step := niceStep(top / 6)
	axisMax := math.Ceil(top*1.02/step) * step
	x := func(v float64) float64 { return chartPlotX0 + v/axisMax*(chartPlotX1-chartPlotX0) }
	plotBottom := chartTop + len(rows)*chartRowH
	height := plotBottom + 124

	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="13">`, chartWidth, height, chartWidth, height)
	p(`<rect width="100%%" height="100%%" fill="#fff"/>`)
	p(`<text class="title" x="16" y="24" font-size="16" font-weight="bold">%s</text>`, esc(title))
	p(`<text class="subtitle" x="16" y="44" fill="#555">%s</text>`, esc(subtitle))

	// Grid and axis: a line per step, the baseline's 1× darker.
	for v := 0.0; v <= axisMax+step/2; v += step {
		colour, dash := "#e0e0e0", ""
		if math.Abs(v-1) < 1e-9 {
			colour, dash = "#616161", ` stroke-dasharray="4,3"`
		}
		p(`<line class="grid" x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"%s/>`, x(v), chartTop-6, x(v), plotBottom, colour, dash)
		p(`<text class="tick" x="%.1f" y="%d" text-anchor="middle">%s×</text>`, x(v), plotBottom+18, fmtTick(v))
	}
	p(`<text class="baseline" x="%.1f" y="%d" text-anchor="middle" fill="#616161" font-size="11">baseline</text>`, x(1), chartTop-10)
	p(`<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000"/>`, chartPlotX0, plotBottom, chartPlotX1, plotBottom)
	p(`<text class="axis-label" x="%d" y="%d" text-anchor="middle">sheba's cost per request over its baseline's (lower is better)</text>`,
		(chartPlotX0+chartPlotX1)/2, plotBottom+38)

	for i, r := range rows {
		y := chartTop + i*chartRowH
		mid := y + chartRowH/2
		class, colour := "bar none", colourNone
		if r.met != nil {
			class, colour = "bar missed", colourMissed
			if *r.met {
				class, colour = "bar met", colourMet
			}
		}
		p(`<g class="row" data-scenario="%s">`, esc(r.name))
		p(`<text class="label" x="%d" y="%d" text-anchor="end">%s</text>`, chartLabelX, mid-2, esc(r.name))
		p(`<text class="caption" x="%d" y="%d" text-anchor="end" fill="#757575" font-size="10">%s</text>`, chartLabelX, mid+11, esc(r.caption))
		p(`<rect class="%s" x="%d" y="%d" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>`,
			class, chartPlotX0, mid-chartBarH/2, x(r.ratio)-chartPlotX0, chartBarH, colour, esc(r.tooltip()))
		p(`<path class="whisker" d="M%.1f %dV%dM%.1f %dH%.1fM%.1f %dV%d" stroke="#212121" fill="none"/>`,
			x(r.lo), mid-5, mid+5, x(r.lo), mid, x(r.hi), x(r.hi), mid-5, mid+5)
		if r.goal > 0 {
			p(`<line class="goal" x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#000" stroke-width="3"/>`, x(r.goal), mid-13, x(r.goal), mid+13)
		}
		if r.moonshot > 0 {
			p(`<line class="moonshot" x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#000" stroke-width="2" stroke-dasharray="3,2"/>`, x(r.moonshot), mid-13, x(r.moonshot), mid+13)
		}
		value := fmt.Sprintf("%.2f×", r.ratio)
		if r.rerun {
			value += " ‡"
		}
		p(`<text class="value" x="%.1f" y="%d">%s</text>`, max(x(r.hi), x(r.ratio), x(r.goal))+6, mid+4, esc(value))
		p(`</g>`)
	}

	// Legend.
	ly := plotBottom + 62
	swatch := func(lx int, class, colour, text string) {
		p(`<rect class="legend-%s" x="%d" y="%d" width="14" height="12" fill="%s"/>`, class, lx, ly-10, colour)
		p(`<text x="%d" y="%d">%s</text>`, lx+20, ly, esc(text))
	}
	swatch(16, "met", colourMet, "goal met")
	swatch(116, "missed", colourMissed, "goal missed")
	swatch(236, "none", colourNone, "no goal")
	p(`<line x1="346" y1="%d" x2="346" y2="%d" stroke="#000" stroke-width="3"/><text x="356" y="%d">goal</text>`, ly-12, ly+2, ly)
	p(`<line x1="416" y1="%d" x2="416" y2="%d" stroke="#000" stroke-width="2" stroke-dasharray="3,2"/><text x="426" y="%d">moonshot</text>`, ly-12, ly+2, ly)
	p(`<text x="516" y="%d">‡ rerun with more pairs</text>`, ly)
	notes := []string{
		"Bar: the median of the pairs; whisker: the lowest and the highest pair. 1× costs what the bare baseline costs.",
		"CPU/req: server CPU time (the server and Postgres) per request; 1 ÷ req/s ratio: a row judged by throughput, inverted.",
	}
	if len(left) > 0 {
		notes = append(notes, "Not drawn: "+strings.Join(left, ", ")+" (goodput under overload: see the table).")
	}
	for i, n := range notes {
		p(`<text class="note" x="16" y="%d" fill="#555" font-size="11">%s</text>`, ly+24+i*16, esc(n))
	}
	p(`</svg>`)
	return b.String()
}

// tooltip is the bar's numbers, shown on hover.
func (r chartRow) tooltip() string {
	s := fmt.Sprintf("%s: %.2f× (pairs %.2f–%.2f), %s", r.name, r.ratio, r.lo, r.hi, r.caption)
	if r.met != nil {
		s += fmt.Sprintf("; goal ≤ %.2f× %s", r.goal, mark(*r.met))
	}
	return s
}

// niceStep is the axis step at least x: 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

// fmtTick prints an axis value without trailing zeros.
func fmtTick(v float64) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}

// esc escapes s for SVG text and attributes.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// chartTitles are the chart's title and subtitle: what ran, where, when.
func chartTitles(rep report) (string, string) {
	m := rep.Machine
	commit := m.ShebaCommit
	if m.ShebaDirty {
		commit += "-dirty"
	}
	title := fmt.Sprintf("sheba over bare baselines, cost per request — %s, %s", commit, rep.Started.Format("2006-01-02 15:04 UTC"))
	sub := fmt.Sprintf("%d× %s, %s · medians of %v pairs of %v runs", m.Cores, m.CPUModel, m.GoVersion, rep.Options["pairs"], rep.Options["duration"])
	return title, sub
}

// writeChart writes rep's chart beside its results file jsonPath (X.json:
// X.svg) and returns its path; "" when rep has no bar to draw (a run of
// webhook scenarios only).
func writeChart(jsonPath string, rep report) (string, error) {
	rows, left := chartRows(rep)
	if len(rows) == 0 {
		return "", nil
	}
	title, sub := chartTitles(rep)
	path := strings.TrimSuffix(jsonPath, ".json") + ".svg"
	return path, os.WriteFile(path, []byte(renderChart(title, sub, rows, left)), 0o644)
}

// redrawChart is -chart: the chart of the results file path, drawn again
// beside it.
func redrawChart(path string, stdout io.Writer) error {
	if !strings.HasSuffix(path, ".json") {
		return usageError("-chart takes a results file, bench/results/<UTC start>.json")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var rep report
	if err := json.Unmarshal(data, &rep); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	svg, err := writeChart(path, rep)
	if err != nil {
		return err
	}
	if svg == "" {
		return errors.New(path + " has no row of the main table to draw (only webhook scenarios?)")
	}
	fmt.Fprintf(stdout, "Chart: %s\n", svg)
	return nil
}
