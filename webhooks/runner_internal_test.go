package webhooks

import (
	"net/http"
	"testing"
	"time"
)

func TestBackoffCeil(t *testing.T) {
	r := &Runner{o: Options{BackoffBase: time.Second, BackoffMax: time.Minute}}
	for _, test := range []struct {
		n    int
		want time.Duration
	}{
		{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {6, 32 * time.Second}, {7, time.Minute}, {100, time.Minute},
	} {
		if got := r.backoffCeil(test.n); got != test.want {
			t.Errorf("backoffCeil(%d): got %v, want %v", test.n, got, test.want)
		}
	}
}

// TestParkFor: the first park lasts about backoff.base, each failed probe
// doubles it, and none outlasts the throttle's window, so a recovered
// endpoint is probed within a window even with backoff.max's hour.
func TestParkFor(t *testing.T) {
	r := &Runner{o: Options{BackoffBase: time.Second, BackoffMax: time.Hour, ThrottleWindow: 10 * time.Second}}
	for _, test := range []struct {
		failures int
		ceil     time.Duration
	}{
		{parkAfter, time.Second}, {parkAfter + 1, 2 * time.Second}, {parkAfter + 3, 8 * time.Second},
		{parkAfter + 4, 10 * time.Second}, {parkAfter + 40, 10 * time.Second},
	} {
		for range 100 {
			if got := r.parkFor(test.failures); got < test.ceil/2 || got > test.ceil {
				t.Fatalf("parkFor(%d): got %v, want within [%v, %v]", test.failures, got, test.ceil/2, test.ceil)
			}
		}
	}
	// A backoff.max below the window bounds the park.
	r.o.BackoffMax = 3 * time.Second
	if got := r.parkFor(parkAfter + 40); got > 3*time.Second {
		t.Errorf("parkFor with backoff.max 3s: got %v, want at most 3s", got)
	}
}

func TestJitterBounds(t *testing.T) {
	const d = 100 * time.Millisecond
	for range 1000 {
		if got := fullJitter(d); got < 0 || got > d {
			t.Fatalf("fullJitter(%v): got %v, want within [0, %v]", d, got, d)
		}
		if got := equalJitter(d); got < d/2 || got > d {
			t.Fatalf("equalJitter(%v): got %v, want within [%v, %v]", d, got, d/2, d)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, test := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"5", 5 * time.Second},
		{"0", 0},
		{"-3", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"99999999999", time.Hour},
	} {
		if got := parseRetryAfter(test.in, now); got != test.want {
			t.Errorf("parseRetryAfter(%q): got %v, want %v", test.in, got, test.want)
		}
	}
}
