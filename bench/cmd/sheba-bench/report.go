package main

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// report is the JSON written under bench/results.
type report struct {
	Started   time.Time        `json:"started"`
	Finished  time.Time        `json:"finished"`
	Machine   machine          `json:"machine"`
	Options   map[string]any   `json:"options"`
	Scenarios []scenarioReport `json:"scenarios"`
	Webhooks  []figureRow      `json:"webhooks,omitempty"`
	// Cluster are the rows about a Postgres cluster (failover).
	Cluster []figureRow `json:"cluster,omitempty"`
	// Events are the rows of open event streams (events-fanout, events-sse).
	Events []figureRow `json:"events,omitempty"`
}

type scenarioReport struct {
	Name        string       `json:"name"`
	About       string       `json:"about"`
	Unavailable string       `json:"unavailable,omitempty"`
	Concurrency int          `json:"concurrency,omitempty"`
	ByOK        bool         `json:"rate_is_goodput,omitempty"`
	Sides       []sideReport `json:"sides,omitempty"`
	// Ratios are A's rate over B's, pair by pair; Ratio is their median.
	Ratios []float64 `json:"ratios,omitempty"`
	Ratio  float64   `json:"ratio,omitempty"`
	// CPURatios and CPURatio are the same for the server's CPU time per
	// request: the cost to compare when a baseline was not saturated.
	CPURatios []float64 `json:"cpu_per_req_ratios,omitempty"`
	CPURatio  float64   `json:"cpu_per_req_ratio,omitempty"`
	// P99Ratios and P99Ratio are the same for p99 latency.
	P99Ratios []float64 `json:"p99_ratios,omitempty"`
	P99Ratio  float64   `json:"p99_ratio,omitempty"`
	// Retries lists the runs that failed once and were run again.
	Retries []string `json:"retries,omitempty"`
	// Spread is pairSpread of the pair ratios of the row's primary measure
	// (primaryMeasure); Rerun, when set, says the first attempt spread more
	// than -spread, and the row is of its rerun.
	Spread float64      `json:"spread"`
	Rerun  *rerunReport `json:"rerun,omitempty"`
	// Goal is what the row is judged on (goals), when it has one.
	Goal *goal `json:"goal,omitempty"`
	// Figures are the scenario's goals and, for a row whose B is A without
	// one thing, what A adds (scenario.figures); the note under the table
	// prints them.
	Figures []figure `json:"figures,omitempty"`
}

type sideReport struct {
	Label  string `json:"label"`
	Tool   string `json:"tool"`
	Server string `json:"server,omitempty"`
	// HookServer is the key of the hook server the side's sheba calls.
	HookServer string   `json:"hook_server,omitempty"`
	Expect     []string `json:"expect"`
	Warmup     *result  `json:"warmup,omitempty"`
	Runs       []result `json:"runs"`
	Summary    summary  `json:"summary"`
}

// summary is a side's row of the table: medians over its runs, errors added
// up, the largest peak RSS.
type summary struct {
	// Rate is requests/s, or successful answers/s for a goodput scenario.
	Rate       float64          `json:"rate"`
	RPS        float64          `json:"rps"`
	OKPerSec   float64          `json:"ok_per_sec"`
	P50ms      float64          `json:"p50_ms"`
	P99ms      float64          `json:"p99_ms"`
	Errors     map[string]int64 `json:"errors"`
	PeakRSSKiB int64            `json:"peak_rss_kib,omitempty"`
	CPUServer  float64          `json:"cpu_server"`
	CPULoadgen float64          `json:"cpu_loadgen"`
	// CPUPerReqUS is the server's (and Postgres's) CPU time per request.
	CPUPerReqUS float64 `json:"cpu_per_req_us"`
	// How busy the server's and the generator's CPUs were, by anyone.
	CPUServerCore float64 `json:"cpu_server_core_busy"`
	CPULoadCore   float64 `json:"cpu_loadgen_core_busy"`
	// Hook is the hook server's share, for a side with one.
	Hook *hookSummary `json:"hook,omitempty"`
}

// hookSummary is what a side's hook server did: medians over the runs.
type hookSummary struct {
	CPU float64 `json:"cpu"`
	// CPUPerReqUS is the hook server's CPU time per request of the side
	// (not per check: with a cache, most requests make none).
	CPUPerReqUS  float64 `json:"cpu_per_req_us"`
	ChecksPerReq float64 `json:"checks_per_req"`
}

func reportOptions(o options, b *bench) map[string]any {
	return map[string]any{
		"scenarios":     o.scenarios,
		"pairs":         o.pairs,
		"duration":      o.duration.String(),
		"warmup":        o.warmup.String(),
		"concurrency":   o.conc,
		"grpc_conns":    o.grpcConns,
		"login_c":       o.loginConc,
		"inflight_high": o.inflightHigh,
		"inflight_low":  o.inflightLow,
		"accounts":      o.accounts,
		"auth":          o.auth,
		"tracing":       b.tracing,
		"webhooks": map[string]any{
			"events": o.webhookEvents, "endpoints": o.webhookEndpoints, "fail": o.webhookFail,
			"outage": o.webhookOutage.String(), "rate": o.webhookRate, "writes": o.webhookWrites,
			"backlog": o.webhookBacklog, "backlog_outage": o.webhookBacklogOutage.String(),
			"replicas": o.webhookReplicas, "fleet_events": o.webhookFleetEvents, "slow": o.webhookSlow.String(),
		},
		"events": map[string]any{
			"streams": o.eventStreams, "keys": o.eventKeys, "conns": o.eventConns, "rate": o.eventRate, "account_rate": o.eventAccountRate,
		},
	}
}

// saturatedCPU is the share of its CPU below which a baseline server was
// not the bottleneck of its run.
const saturatedCPU = 0.8

// genBound reports whether the baseline server was left idle part of the
// time: the load generator, or other processes on the machine, limited the
// run, and the baseline could go faster than measured.
func (s scenarioReport) genBound() bool {
	return !s.ByOK && len(s.Sides) == 2 && s.Sides[1].Summary.CPUServer < saturatedCPU
}

// rate is the headline number of a run.
func (s scenarioReport) rate(r result) float64 {
	if s.ByOK {
		return r.OKPerSec
	}
	return r.RPS
}

// summarize fills each side's summary and the ratios.
func (s *scenarioReport) summarize() {
	for i := range s.Sides {
		sd := &s.Sides[i]
		var rate, rps, ok, p50, p99, cs, cl, ccs, ccl, cpr, hc, hcpr, hpr []float64
		sum := summary{Errors: map[string]int64{}}
		for _, r := range sd.Runs {
			rate = append(rate, s.rate(r))
			rps = append(rps, r.RPS)
			ok = append(ok, r.OKPerSec)
			p50 = append(p50, r.P50ms)
			p99 = append(p99, r.P99ms)
			cs = append(cs, r.CPUServer)
			cl = append(cl, r.CPULoadgen)
			ccs = append(ccs, r.CPUServerCore)
			ccl = append(ccl, r.CPULoadCore)
			if r.Requests > 0 {
				cpr = append(cpr, cpuPerReq(r)*1e6)
				hcpr = append(hcpr, r.CPUHookSec/float64(r.Requests)*1e6)
				hpr = append(hpr, float64(r.HookChecks)/float64(r.Requests))
			}
			hc = append(hc, r.CPUHook)
			for k, v := range r.Statuses {
				if !slices.Contains(sd.Expect, k) {
					sum.Errors[k] += v
				}
			}
			for k, v := range r.SocketErrors {
				sum.Errors[k] += v
			}
			sum.PeakRSSKiB = max(sum.PeakRSSKiB, r.PeakRSSKiB)
		}
		sum.Rate, sum.RPS, sum.OKPerSec = median(rate), median(rps), median(ok)
		sum.P50ms, sum.P99ms = median(p50), median(p99)
		sum.CPUServer, sum.CPULoadgen = median(cs), median(cl)
		sum.CPUServerCore, sum.CPULoadCore = median(ccs), median(ccl)
		sum.CPUPerReqUS = median(cpr)
		if sd.HookServer != "" {
			sum.Hook = &hookSummary{CPU: median(hc), CPUPerReqUS: median(hcpr), ChecksPerReq: median(hpr)}
		}
		sd.Summary = sum
	}
	if len(s.Sides) != 2 {
		return
	}
	a, b := s.Sides[0].Runs, s.Sides[1].Runs
	s.Ratios, s.P99Ratios, s.CPURatios = nil, nil, nil
	for i := 0; i < len(a) && i < len(b); i++ {
		if pb := cpuPerReq(b[i]); pb > 0 {
			s.CPURatios = append(s.CPURatios, cpuPerReq(a[i])/pb)
		}
		if rb := s.rate(b[i]); rb > 0 {
			s.Ratios = append(s.Ratios, s.rate(a[i])/rb)
		}
		if b[i].P99ms > 0 {
			s.P99Ratios = append(s.P99Ratios, a[i].P99ms/b[i].P99ms)
		}
	}
	s.Ratio, s.P99Ratio, s.CPURatio = median(s.Ratios), median(s.P99Ratios), median(s.CPURatios)
	s.Spread = pairSpread(s.pairRatios(primaryMeasure(*s)))
}

// cpuPerReq is the server CPU time of a run per request, in seconds; 0
// for a run without requests.
func cpuPerReq(r result) float64 {
	if r.Requests == 0 {
		return 0
	}
	return r.CPUServerSec / float64(r.Requests)
}

// ratioCell is a ratio column's cell: the median of the pair ratios xs,
// bold for the ratio the row is judged on, and their span.
func ratioCell(median float64, xs []float64, bold bool) string {
	if bold {
		return fmt.Sprintf("**%.2f** (%s)", median, span(xs))
	}
	return fmt.Sprintf("%.2f (%s)", median, span(xs))
}

// span shows the lowest and highest of the pair ratios.
func span(xs []float64) string {
	if len(xs) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f–%.2f", slices.Min(xs), slices.Max(xs))
}

// median of xs (the mean of the middle two for an even count), 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// renderTable prints the markdown table and the notes under it.
func renderTable(rep report) string {
	var b strings.Builder
	m := rep.Machine
	pin := fmt.Sprintf("servers and Postgres pinned to CPU %d, load generator to CPU %d (taskset)", m.ServerCPU, m.LoadgenCPU)
	if !m.Taskset {
		pin = "no CPU pinning (taskset missing or disabled)"
	}
	pairs, dur, warm := rep.Options["pairs"], rep.Options["duration"], rep.Options["warmup"]
	fmt.Fprintf(&b, "\n### sheba load benchmark — %s%s, %s\n\n", m.ShebaCommit, map[bool]string{true: "-dirty", false: ""}[m.ShebaDirty], rep.Started.Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "%d× %s, %s, %s, Linux %s · %s · medians of %v runs of %v per side, alternated A B A B after a %v warm-up · keep-alive, closed loop, concurrency %v\n\n",
		m.Cores, m.CPUModel, m.MemTotal, m.GoVersion, m.Kernel, pin, pairs, dur, warm, rep.Options["concurrency"])
	b.WriteString("| scenario | side (load) | CPU/req | req/s | p50 | p99 | errors by status | CPU srv / gen | peak RSS | CPU/req ratio | req/s ratio | goal |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|---|--:|--:|--:|--:|---|\n")
	byName := rep.rowsByName()
	rerunLimit := 0.0
	for _, s := range rep.Scenarios {
		if s.Unavailable != "" {
			fmt.Fprintf(&b, "| %s | %s | | | | | | | | | | |\n", s.Name, s.Unavailable)
			continue
		}
		for i, sd := range s.Sides {
			name, cpuRatio, rateRatio, goalCell := "", "", "", ""
			if i == 0 {
				name = s.Name
				if s.ByOK {
					name += fmt.Sprintf(" (c=%d, 2xx/s, p50/p99 of 2xx)", s.Concurrency)
				}
				if s.Rerun != nil {
					name += " ‡ " + s.Rerun.String()
					rerunLimit = s.Rerun.Limit
				}
				primary := primaryMeasure(s)
				cpuRatio = ratioCell(s.CPURatio, s.CPURatios, primary == measureCPU)
				rateRatio = ratioCell(s.Ratio, s.Ratios, primary == measureRate)
				if s.genBound() {
					rateRatio += " †"
				}
				goalCell = judge(s, byName).String()
				if goalCell == "" {
					// A goal on a figure of the row's own
					// (get-subscription-standby's primary CPU).
					goalCell = strings.Join(figureStrings(goalFigures(s.Figures)), "; ")
				}
			}
			rss := "n/a"
			if sd.Summary.PeakRSSKiB > 0 {
				rss = fmt.Sprintf("%.0f MiB", float64(sd.Summary.PeakRSSKiB)/1024)
			}
			fmt.Fprintf(&b, "| %s | %s (%s) | %s | %s | %s | %s | %s | %s / %s | %s | %s | %s | %s |\n",
				name, sd.Label, sd.Tool, fmtMs(sd.Summary.CPUPerReqUS/1000), fmtRate(sd.Summary.Rate), fmtMs(sd.Summary.P50ms), fmtMs(sd.Summary.P99ms),
				fmtErrors(sd.Summary.Errors), fmtPct(sd.Summary.CPUServer), fmtPct(sd.Summary.CPULoadgen),
				rss, cpuRatio, rateRatio, goalCell)
		}
	}
	b.WriteString("\nCPU/req: server CPU time (the server process and Postgres) per request, the primary figure: its ratio is sheba's over the baseline's (lower is better) and the goals of issue 23 bound it. req/s ratio: sheba's req/s over the baseline's (login-overload: goodput of the shedding server over the unshed one; higher is better). Each ratio is the median of the pairs, the lowest and highest pair in parentheses; the one in bold is the row's goal's (else CPU/req, or goodput for an overload row). CPU srv: the server process plus Postgres, in shares of one CPU; gen: the load generator.")
	if rerunLimit > 0 {
		fmt.Fprintf(&b, " ‡: the first pairs' ratios (the bold measure) spread more than %s (the highest over the lowest, less one), so the row was measured again with twice the pairs, once; it shows the rerun, the JSON the first ratios too.", fmtPct(rerunLimit))
	}
	for _, s := range rep.Scenarios {
		if s.genBound() {
			fmt.Fprintf(&b, " †: the baseline server used less than %.0f%% of its CPU, so something else (the load generator, or other processes) limited it; it may be faster than measured, and the CPU per request compares the two better.", saturatedCPU*100)
			break
		}
	}
	b.WriteString("\n")
	for _, n := range notes(rep) {
		b.WriteString("- " + n + "\n")
	}
	return b.String()
}

// goalFigures are the figures of fs that have a goal.
func goalFigures(fs []figure) []figure {
	var out []figure
	for _, f := range fs {
		if f.Met != nil {
			out = append(out, f)
		}
	}
	return out
}

// notes are the conclusions printed under the table.
func notes(rep report) []string {
	var out []string
	byName := map[string]scenarioReport{}
	worst := scenarioReport{CPURatio: math.Inf(-1)}
	for _, s := range rep.Scenarios {
		if s.Unavailable != "" || len(s.Sides) != 2 {
			continue
		}
		byName[s.Name] = s
		if !s.ByOK && s.CPURatio > worst.CPURatio {
			worst = s
		}
	}
	if worst.Name != "" {
		out = append(out, fmt.Sprintf("largest cost over a baseline: %s at %.2f× the CPU per request of %s (%s vs %s; req/s ratio %.2f)",
			worst.Name, worst.CPURatio, worst.Sides[1].Label, fmtMs(worst.Sides[0].Summary.CPUPerReqUS/1000), fmtMs(worst.Sides[1].Summary.CPUPerReqUS/1000), worst.Ratio))
	}
	for _, c := range []struct{ name, what string }{
		{"error-rest", "error path vs success path (sheba error-rest / ping-rest)"},
		{"ping-rest-traced", "tracing always on (sheba traced / untraced ping-rest)"},
	} {
		if e, ok := byName[c.name]; ok {
			if p, ok := byName["ping-rest"]; ok && p.Sides[0].Summary.Rate > 0 && p.Sides[0].Summary.CPUPerReqUS > 0 {
				out = append(out, fmt.Sprintf("%s: CPU/req %.2f×, req/s %.2f", c.what,
					e.Sides[0].Summary.CPUPerReqUS/p.Sides[0].Summary.CPUPerReqUS, e.Sides[0].Summary.Rate/p.Sides[0].Summary.Rate))
			}
		}
	}
	if l, ok := byName["login-overload"]; ok {
		a, b := l.Sides[0].Summary, l.Sides[1].Summary
		out = append(out, fmt.Sprintf("login-overload: shedding keeps p99 of the successful logins at %s vs %s unshed (ratio %.2f), goodput %s vs %s 2xx/s, rejecting %s req/s with 429",
			fmtMs(a.P99ms), fmtMs(b.P99ms), l.P99Ratio, fmtRate(a.OKPerSec), fmtRate(b.OKPerSec), fmtRate(a.RPS-a.OKPerSec)))
	}
	out = append(out, cheapestPeerNotes(rep)...)
	if _, ok := byName["readyz"]; ok {
		out = append(out, "readyz: sheba answers from the state of its periodic health check, the baseline pings Postgres on every request")
	}
	for _, s := range rep.Scenarios {
		if len(s.Figures) > 0 {
			out = append(out, s.Name+": "+strings.Join(figureStrings(s.Figures), "; "))
		}
	}
	// The CPUs were busier than the processes under test made them: other
	// work on the machine competed with the runs.
	var others float64
	for _, s := range byName {
		for _, sd := range s.Sides {
			// A hook server runs on the server CPU and is not in CPUServer.
			srv := sd.Summary.CPUServer
			if sd.Summary.Hook != nil {
				srv += sd.Summary.Hook.CPU
			}
			others = max(others, sd.Summary.CPUServerCore-srv, sd.Summary.CPULoadCore-sd.Summary.CPULoadgen)
		}
	}
	if others > 0.15 {
		out = append(out, fmt.Sprintf("other processes used up to %.0f%% of a pinned CPU during some runs (see cpu_*_core_busy in the JSON): expect noise, rerun on a quiet machine or raise -pairs", others*100))
	}
	return out
}

func fmtRate(x float64) string {
	switch {
	case x >= 100:
		return commas(int64(math.Round(x)))
	case x >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	default:
		return strconv.FormatFloat(x, 'f', 2, 64)
	}
}

func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func fmtMs(ms float64) string {
	switch {
	case ms <= 0:
		return "–"
	case ms < 1:
		return fmt.Sprintf("%.0f µs", ms*1000)
	case ms < 10:
		return fmt.Sprintf("%.2f ms", ms)
	case ms < 1000:
		return fmt.Sprintf("%.0f ms", ms)
	default:
		return fmt.Sprintf("%.2f s", ms/1000)
	}
}

func fmtPct(x float64) string {
	if x < 0 {
		return "?"
	}
	return fmt.Sprintf("%.0f%%", x*100)
}

// fmtErrors lists unexpected answers by status, most frequent first.
func fmtErrors(errs map[string]int64) string {
	if len(errs) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(errs))
	for k := range errs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if errs[keys[i]] != errs[keys[j]] {
			return errs[keys[i]] > errs[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %s", k, commas(errs[k]))
	}
	return strings.Join(parts, ", ")
}
