package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestKeyedWrite(t *testing.T) {
	for _, test := range []struct {
		w                 keyedWrite
		expected, retryMe bool
		acknowledged      bool
	}{
		{keyedWrite{code: http.StatusOK, body: `{"id":"s1"}`}, true, false, true},
		{keyedWrite{code: http.StatusServiceUnavailable, body: `{"code":14,"details":[{"reason":"DATABASE_UNAVAILABLE"}]}`}, true, true, false},
		{keyedWrite{code: http.StatusServiceUnavailable, body: `{"code":14,"message":"overloaded"}`}, false, true, false},
		{keyedWrite{code: http.StatusGatewayTimeout}, true, true, false},
		{keyedWrite{}, true, true, false},
		{keyedWrite{code: http.StatusInternalServerError, body: "boom"}, false, false, false},
		{keyedWrite{code: http.StatusConflict}, false, false, false},
		{keyedWrite{code: http.StatusServiceUnavailable, body: `DATABASE_UNAVAILABLE: FATAL (SQLSTATE 57P01)`}, false, true, false},
	} {
		if got := test.w.expected(); got != test.expected {
			t.Errorf("%d %q: expected() = %v, want %v", test.w.code, test.w.body, got, test.expected)
		}
		if got := test.w.retryable(); got != test.retryMe {
			t.Errorf("%d %q: retryable() = %v, want %v", test.w.code, test.w.body, got, test.retryMe)
		}
		if got := test.w.acknowledged(); got != test.acknowledged {
			t.Errorf("%d %q: acknowledged() = %v, want %v", test.w.code, test.w.body, got, test.acknowledged)
		}
	}
	if id, err := (keyedWrite{code: 200, body: `{"id":"5f0c","accountId":"a","plan":"pro"}`}).subscriptionID(); err != nil || id != "5f0c" {
		t.Errorf("subscriptionID = %q, %v; want 5f0c", id, err)
	}
	if _, err := (keyedWrite{key: `"k"`, code: 200, body: `{}`}).subscriptionID(); err == nil {
		t.Error("subscriptionID of an answer without an id: got no error")
	}
}

func TestFailoverFigures(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 14, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	unavailable := `{"details":[{"reason":"DATABASE_UNAVAILABLE"}]}`
	o := failoverOutcome{
		// Successes until 1 s, the primary stopped at 1.1 s, promoted at
		// 2.5 s; the first success after it at 2.9 s, and one answered
		// late, at 0.5 s, among them.
		writes: []keyedWrite{
			{code: 200, at: at(100)}, {code: 200, at: at(1000)}, {code: 200, at: at(500)},
			{code: 503, body: unavailable, at: at(1200)}, {code: 0, at: at(1300)}, {code: 504, at: at(2000)},
			{code: 500, body: "boom", at: at(2100)},
			{code: 200, at: at(2900)}, {code: 200, at: at(3000)},
		},
		stopped: at(1100), down: at(1400), promoted: at(2500),
		retried: 4, unretried: 1,
		lost: 0, duplicates: 2, missing: 1,
	}
	var got []string
	for _, f := range failoverFigures(o) {
		got = append(got, f.String())
	}
	want := []string{
		"seconds without a successful write 1.90 s",
		"first successful write after the promotion 0.40 s (goal ≤ 5 s ✓)",
		"writes lost 0 (goal = 0 ✓)",
		"duplicates after keyed retries 2 (goal = 0 ✗)",
		"accounts without one subscription and one event 1 (goal = 0 ✗)",
		"answers other than 200, 503 DATABASE_UNAVAILABLE or 504 1 (goal = 0 ✗)",
		"writes not answered 200 after their retries 1 (goal = 0 ✗)",
		"switchover: the primary's stop 0.30 s", "the promotion 1.10 s",
		"writes 9", "answered 200 5", "503 1", "504 1", "no answer 1", "retried with their keys 4",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("figures (-want +got):\n%s", diff)
	}

	// The longest time without a success is between successes in time
	// order, whatever the order they were recorded in.
	o.writes = []keyedWrite{{code: 200, at: at(0)}, {code: 200, at: at(900)}, {code: 200, at: at(450)}}
	if got := failoverFigures(o)[0].String(); got != "seconds without a successful write 0.45 s" {
		t.Errorf("successes at 0, 900 and 450 ms: %s, want 0.45 s", got)
	}

	// No success after the promotion: the recovery figure misses its goal.
	o.writes = []keyedWrite{{code: 200, at: at(100)}, {code: 503, body: unavailable, at: at(2600)}}
	first := failoverFigures(o)[1]
	if first.Met == nil || *first.Met || !strings.HasPrefix(first.String(), "first successful write after the promotion -1 s") {
		t.Errorf("without a write after the promotion: %s, want -1 and the goal missed", first)
	}
}

func TestClusterTable(t *testing.T) {
	table := renderFigureTable("cluster scenario", []figureRow{{Name: "failover", About: "switchover", Seconds: 12.2, Figures: []figure{
		fig("seconds without a successful write", 1.71, " s"), goalFig("writes lost", 0, "", "==", 0),
	}}})
	want := "\n| cluster scenario | figures (goal) | goals met | took |\n|---|---|--:|--:|\n" +
		"| failover: switchover | seconds without a successful write 1.71 s; writes lost 0 (goal = 0 ✓) | 1 of 1 | 12s |\n"
	if table != want {
		t.Errorf("table:\n%s\nwant\n%s", table, want)
	}
	if got := renderFigureTable("cluster scenario", nil); got != "" {
		t.Errorf("table of no rows: %q, want none", got)
	}
}
