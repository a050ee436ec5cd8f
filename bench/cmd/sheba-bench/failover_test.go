package main

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/shebasvc/sheba/e2e/keyedwrites"
)

func TestFailoverAnswers(t *testing.T) {
	for _, test := range []struct {
		a                      keyedwrites.Answer
		expected, acknowledged bool
	}{
		{keyedwrites.Answer{Code: http.StatusOK, Body: []byte(`{"id":"s1"}`)}, true, true},
		{keyedwrites.Answer{Code: http.StatusServiceUnavailable, Body: []byte(`{"code":14,"details":[{"reason":"DATABASE_UNAVAILABLE"}]}`)}, true, false},
		{keyedwrites.Answer{Code: http.StatusServiceUnavailable, Body: []byte(`{"code":14,"message":"overloaded"}`)}, false, false},
		{keyedwrites.Answer{Code: http.StatusGatewayTimeout}, true, false},
		{keyedwrites.Answer{Err: errors.New("EOF")}, true, false},
		{keyedwrites.Answer{Code: http.StatusInternalServerError, Body: []byte("boom")}, false, false},
		{keyedwrites.Answer{Code: http.StatusConflict}, false, false},
		{keyedwrites.Answer{Code: http.StatusServiceUnavailable, Body: []byte(`DATABASE_UNAVAILABLE: FATAL (SQLSTATE 57P01)`)}, false, false},
	} {
		if got := expected(test.a); got != test.expected {
			t.Errorf("%d %q: expected = %v, want %v", test.a.Code, test.a.Body, got, test.expected)
		}
		if got := acknowledged(test.a); got != test.acknowledged {
			t.Errorf("%d %q: acknowledged = %v, want %v", test.a.Code, test.a.Body, got, test.acknowledged)
		}
	}
	if id, err := subscriptionID(keyedwrites.Answer{Code: 200, Body: []byte(`{"id":"5f0c","accountId":"a","plan":"pro"}`)}); err != nil || id != "5f0c" {
		t.Errorf("subscriptionID = %q, %v; want 5f0c", id, err)
	}
	if _, err := subscriptionID(keyedwrites.Answer{Code: 200, Body: []byte(`{}`)}); err == nil {
		t.Error("subscriptionID of an answer without an id: got no error")
	}
}

func TestFailoverFigures(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 14, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	unavailable := []byte(`{"details":[{"reason":"DATABASE_UNAVAILABLE"}]}`)
	ok := func(ms int) keyedwrites.Answer { return keyedwrites.Answer{Code: 200, At: at(ms)} }
	o := failoverOutcome{
		// Successes until 1 s, the primary stopped at 1.1 s, promoted at
		// 2.5 s; the first success after it at 2.9 s, and one answered
		// late, at 0.5 s, among them.
		answers: []keyedwrites.Answer{
			ok(100), ok(1000), ok(500),
			{Code: 503, Body: unavailable, At: at(1200)}, {Err: errors.New("EOF"), At: at(1300)}, {Code: 504, At: at(2000)},
			{Code: 500, Body: []byte("boom"), At: at(2100)},
			ok(2900), ok(3000),
		},
		stopped: at(1100), down: at(1400), promoted: at(2500),
		lost: 0, duplicates: 2, missing: 1,
	}
	// The retries: the 503 and the unanswered write made (the second had
	// been made before), the 504 still 503, the 500 left alone.
	o.final = append([]keyedwrites.Answer(nil), o.answers...)
	o.final[3], o.final[4], o.final[5] = ok(4000), keyedwrites.Answer{Code: 200, Replayed: true}, keyedwrites.Answer{Code: 503}
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
		"writes not answered 200 after their retries 2 (goal = 0 ✗)",
		"switchover: the primary's stop 0.30 s", "the promotion 1.10 s",
		"writes 9", "answered 200 5", "503 1", "504 1", "no answer 1",
		"retried with their keys 4", "of which made before (the retry replayed them) 1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("figures (-want +got):\n%s", diff)
	}

	// The longest time without a success is between successes in time
	// order, whatever the order they were recorded in.
	o.answers, o.final = []keyedwrites.Answer{ok(0), ok(900), ok(450)}, nil
	if got := failoverFigures(o)[0].String(); got != "seconds without a successful write 0.45 s" {
		t.Errorf("successes at 0, 900 and 450 ms: %s, want 0.45 s", got)
	}

	// No success after the promotion: the recovery figure misses its goal.
	o.answers = []keyedwrites.Answer{ok(100), {Code: 503, Body: unavailable, At: at(2600)}}
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
