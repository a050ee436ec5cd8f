package main

// get-subscription-standby: the get-subscription lookup with sheba reading
// from a streaming standby (database.read_url), against the same sheba on
// the primary alone. What it is for is the primary's CPU per lookup: the
// standby serves the reads (bench/README.md).

import (
	"context"
	"fmt"
	"time"
)

const scenGetSubscriptionStandby = "get-subscription-standby"

// srvShebaStandby is sheba with database.read_url on the bench's standby.
const srvShebaStandby = "sheba-standby"

// standbyRatioGoal bounds the primary's CPU per lookup with read_url over
// that without: the standby serves the reads.
const standbyRatioGoal = 0.2

// cpuSplit is the server CPU of a run of a side with a standby, in parts:
// the server process (sheba), the primary's Postgres (the processes of
// scripts/pg.sh's cluster) and the standby's. Each counts in CPUServerSec.
type cpuSplit struct {
	ProcessSec float64 `json:"process_seconds"`
	PrimarySec float64 `json:"primary_seconds"`
	StandbySec float64 `json:"standby_seconds"`
}

// standbyScenario is the get-subscription-standby row: getSub is
// get-subscription's load.
func (b *bench) standbyScenario(getSub func(*server) load) scenario {
	return scenario{
		name: scenGetSubscriptionStandby,
		about: fmt.Sprintf("get-subscription (%d seeded accounts at random) through sheba with database.read_url on a streaming standby of the cluster, against the same sheba on the primary alone; CPU srv counts sheba, the primary and the standby, and the note under the table gives each apart",
			b.opts.accounts),
		a:       side{label: "sheba read_url=standby", server: srvShebaStandby, expect: []string{"200"}, load: getSub, standby: true},
		b:       side{label: "sheba primary alone", server: srvSheba, expect: []string{"200"}, load: getSub, standby: true},
		conc:    b.opts.conc,
		standby: true,
		done:    b.stopStandby,
	}
}

// ensureStandby starts, once, a streaming standby of the bench's cluster
// (asynchronous, as a read replica is) and waits until it streams.
func (b *bench) ensureStandby(ctx context.Context) (*postgres, error) {
	if b.standby != nil {
		return b.standby, nil
	}
	const name = "standby"
	st, err := b.baseBackup(ctx, b.pg, name, true)
	if err != nil {
		return nil, err
	}
	if err := b.startCopy(ctx, st); err != nil {
		return nil, err
	}
	if err := b.pg.waitStandby(ctx, name, false); err != nil {
		return nil, err
	}
	b.standby = st
	return st, nil
}

// stopStandby stops sheba on the standby and the standby, once its row is
// measured: a standby streaming from the cluster would add its WAL sender
// to the primary's CPU in the rows after it.
func (b *bench) stopStandby() error {
	if s, ok := b.servers[srvShebaStandby]; ok {
		s.proc.stop(5 * time.Second)
		delete(b.servers, srvShebaStandby)
	}
	if b.standby == nil {
		return nil
	}
	st := b.standby
	b.standby = nil
	return st.stop(context.Background(), "fast")
}

// standbyFigures are the row's figures: the primary's CPU per lookup with
// read_url over without, pair by pair, against its goal; each side's
// primary, standby and sheba CPU per request (the medians of the runs).
func standbyFigures(sr scenarioReport) []figure {
	if len(sr.Sides) != 2 {
		return nil
	}
	perReq := func(runs []result, part func(cpuSplit) float64) []float64 {
		var out []float64
		for _, r := range runs {
			if r.Requests > 0 && r.CPUSplit != nil {
				out = append(out, part(*r.CPUSplit)/float64(r.Requests)*1e6)
			}
		}
		return out
	}
	primary := func(c cpuSplit) float64 { return c.PrimarySec }
	standby := func(c cpuSplit) float64 { return c.StandbySec }
	sheba := func(c cpuSplit) float64 { return c.ProcessSec }
	a, b := sr.Sides[0].Runs, sr.Sides[1].Runs
	pa, pb := perReq(a, primary), perReq(b, primary)
	var ratios []float64
	for i := 0; i < len(pa) && i < len(pb); i++ {
		if pb[i] > 0 {
			ratios = append(ratios, pa[i]/pb[i])
		}
	}
	if len(ratios) == 0 {
		return nil
	}
	return []figure{
		goalFig("primary CPU/lookup ratio", round2(median(ratios)), "", "<=", standbyRatioGoal),
		fig("primary CPU/lookup with read_url", round1(median(pa)), " µs"),
		fig("alone", round1(median(pb)), " µs"),
		fig("standby CPU/lookup with read_url", round1(median(perReq(a, standby))), " µs"),
		fig("sheba CPU/req with read_url", round1(median(perReq(a, sheba))), " µs"),
		fig("on the primary alone", round1(median(perReq(b, sheba))), " µs"),
	}
}
