package throttle_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shebasvc/sheba/webhooks/throttle"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *fakeClock               { return &fakeClock{t: time.Unix(1_000_000, 0)} }
func fixed(v float64) func() float64     { return func() float64 { return v } }

func TestRejectProbability(t *testing.T) {
	for _, test := range []struct {
		name              string
		requests, accepts int
		want              float64
	}{
		{name: "empty", want: 0},
		{name: "all accepted", requests: 100, accepts: 100, want: 0},
		{name: "half accepted is still under K", requests: 100, accepts: 50, want: 0},
		{name: "a third accepted", requests: 90, accepts: 30, want: 30.0 / 91},
		{name: "none accepted", requests: 99, accepts: 0, want: 99.0 / 100},
	} {
		t.Run(test.name, func(t *testing.T) {
			clock := newClock()
			// random 0.999... lets every request through while counting.
			th := throttle.New(throttle.WithClock(clock.now), throttle.WithRandom(fixed(0.9999999)))
			for i := range test.requests {
				th.Allow()
				if i < test.accepts {
					th.Accepted()
				}
			}
			if got := th.RejectProbability(); math.Abs(got-test.want) > 1e-9 {
				t.Errorf("got reject probability %v, want %v", got, test.want)
			}
		})
	}
}

func TestAllowFollowsProbability(t *testing.T) {
	clock := newClock()
	var r float64
	th := throttle.New(throttle.WithClock(clock.now), throttle.WithRandom(func() float64 { return r }))
	// Nine unaccepted requests: the tenth is refused with probability 9/10.
	r = 0.9999
	for range 9 {
		if !th.Allow() {
			t.Fatal("got a refusal while the random draw is above every probability, want none")
		}
	}
	r = 0.89
	if th.Allow() {
		t.Errorf("got the request allowed with draw 0.89 < p = 0.9, want it refused")
	}
	// The refused request counted: p is now 10/11.
	if got, want := th.RejectProbability(), 10.0/11; math.Abs(got-want) > 1e-9 {
		t.Errorf("got reject probability %v after a refusal, want %v", got, want)
	}
	r = 0.95
	if !th.Allow() {
		t.Errorf("got the request refused with draw 0.95 > p = 10/11, want it allowed")
	}
}

func TestWindowForgets(t *testing.T) {
	clock := newClock()
	th := throttle.New(throttle.WithClock(clock.now), throttle.WithWindow(10*time.Second), throttle.WithRandom(fixed(0.9999999)))
	for range 50 {
		th.Allow()
	}
	if th.RejectProbability() == 0 {
		t.Fatal("got reject probability 0 after 50 unaccepted requests, want above 0")
	}
	// Half a window later the counts are all still inside it.
	clock.add(5 * time.Second)
	if th.RejectProbability() == 0 {
		t.Errorf("got reject probability 0 half a window later, want above 0")
	}
	clock.add(5*time.Second + time.Millisecond)
	if got := th.RejectProbability(); got != 0 {
		t.Errorf("got reject probability %v a full window later, want 0", got)
	}
}

func TestRecovery(t *testing.T) {
	clock := newClock()
	rng := rand.New(rand.NewPCG(1, 2))
	th := throttle.New(throttle.WithClock(clock.now), throttle.WithWindow(time.Minute), throttle.WithRandom(rng.Float64))
	// An outage of 10 s at 10 requests/s: everything sent fails, and the
	// client soon holds back.
	sent := 0
	for range 100 {
		if th.Allow() {
			sent++
		}
		clock.add(100 * time.Millisecond)
	}
	if sent > 30 {
		t.Errorf("got %d of 100 requests sent during the outage, want the throttle to hold most back", sent)
	}
	// The backend is back: every request sent is accepted, and the throttle
	// opens again within the window, letting more through as it goes.
	opened := false
	sentFirst, sentSecond := 0, 0
	for i := range 3000 {
		if th.Allow() {
			th.Accepted()
			if i < 100 {
				sentFirst++
			} else if i < 200 {
				sentSecond++
			}
		}
		clock.add(100 * time.Millisecond)
		if i >= 200 && th.RejectProbability() == 0 {
			opened = true
			break
		}
	}
	if !opened {
		t.Errorf("got the throttle still closed a window after recovery, want it open")
	}
	if sentSecond <= sentFirst {
		t.Errorf("got %d then %d requests sent in the first two 10 s after recovery, want a rising rate", sentFirst, sentSecond)
	}
}

func TestGroup(t *testing.T) {
	clock := newClock()
	g := throttle.NewGroup(throttle.WithClock(clock.now), throttle.WithWindow(time.Second), throttle.WithRandom(fixed(0.9999999)))
	a := g.Get("a")
	if g.Get("a") != a {
		t.Errorf("got a new throttle for the same backend, want the same one")
	}
	for range 10 {
		a.Allow()
	}
	if got := g.Get("b").RejectProbability(); got != 0 {
		t.Errorf("got reject probability %v for backend b after failures of a, want 0", got)
	}
	// Two windows later both are empty and a sweep drops them.
	clock.add(2 * time.Second)
	g.Get("c")
	if got := g.Len(); got != 1 {
		t.Errorf("got %d throttles after a sweep, want 1 (c)", got)
	}
}
