package gradient_test

import (
	"testing"
	"time"

	"github.com/shebasvc/sheba/interceptors/concurrency/gradient"
)

// sim drives a Limiter with a simulated clock: each window, the calls in
// flight are the limit (or fewer, when fewer clients come) and each takes
// the latency the model gives for that many.
type sim struct {
	l   *gradient.Limiter
	now time.Time
}

func newSim(min, max int) *sim {
	return &sim{l: gradient.New(min, max), now: time.Unix(1_700_000_000, 0)}
}

// run plays n windows of 50 ms, 20 calls each, with clients callers, each
// call taking latency(inflight).
func (s *sim) run(n, clients int, latency func(inflight int) time.Duration) {
	for range n {
		inflight := min(s.l.Limit(), clients)
		rtt := latency(inflight)
		for range 20 {
			s.now = s.now.Add(50 * time.Millisecond / 20)
			s.l.Observe(s.now, rtt, int64(inflight))
		}
	}
}

func constant(d time.Duration) func(int) time.Duration { return func(int) time.Duration { return d } }

// database is a server with 16 connections and 10 ms queries: beyond 16
// in flight, calls queue for a connection.
func database(inflight int) time.Duration {
	return time.Duration(float64(10*time.Millisecond) * max(1, float64(inflight)/16))
}

func TestGrowsWhileLatencyHolds(t *testing.T) {
	s := newSim(4, 200)
	s.run(400, 1000, constant(10*time.Millisecond))
	if got := s.l.Limit(); got != 200 {
		t.Errorf("limit after 400 windows at a steady latency: got %d, want 200", got)
	}
}

func TestNotRaisedWhenIdle(t *testing.T) {
	s := newSim(4, 200)
	s.run(400, 1, constant(10*time.Millisecond))
	if got := s.l.Limit(); got > 4 {
		t.Errorf("limit with one client: got %d, want 4 (no evidence for more)", got)
	}
}

// TestConvergesOnDatabase overloads the simulated database with 200
// clients: the limit settles near its 16 connections, so admitted calls
// wait little, and it does not fall below them.
func TestConvergesOnDatabase(t *testing.T) {
	s := newSim(4, 500)
	s.run(400, 200, database)
	var lo, hi int = 1 << 30, 0
	for range 100 {
		s.run(1, 200, database)
		lo, hi = min(lo, s.l.Limit()), max(hi, s.l.Limit())
	}
	if lo < 12 || hi > 48 {
		t.Errorf("limit over 100 windows in overload: %d..%d, want within 12..48 (16 connections)", lo, hi)
	}
	t.Logf("limit in overload %d..%d, latency of admitted calls up to %v", lo, hi, database(hi))
}

func TestConvergesDownAndRecovers(t *testing.T) {
	s := newSim(4, 200)
	s.run(400, 1000, constant(10*time.Millisecond))
	s.run(60, 1000, constant(40*time.Millisecond))
	if got := s.l.Limit(); got > 20 {
		t.Errorf("limit 60 windows after latency went 10ms -> 40ms: got %d, want <= 20", got)
	}
	s.run(400, 1000, constant(10*time.Millisecond))
	if got := s.l.Limit(); got != 200 {
		t.Errorf("limit 400 windows after latency came back: got %d, want 200", got)
	}
}

// TestGCPause plays one window where every call took 300 ms more (a
// stop-the-world pause): the limit dips at most one step and is back at
// the maximum soon after.
func TestGCPause(t *testing.T) {
	s := newSim(4, 200)
	s.run(400, 1000, constant(10*time.Millisecond))
	s.run(1, 1000, constant(310*time.Millisecond))
	if got := s.l.Limit(); got < 180 {
		t.Errorf("limit after one paused window: got %d, want >= 180 (one smoothed step)", got)
	}
	s.run(20, 1000, constant(10*time.Millisecond))
	if got := s.l.Limit(); got != 200 {
		t.Errorf("limit 20 windows after the pause: got %d, want 200", got)
	}
}

// TestCancellations releases a burst of calls that callers cancelled after
// waiting long: unmeasured, they leave the limit where it was.
func TestCancellations(t *testing.T) {
	l := gradient.New(4, 200)
	s := &sim{l: l, now: time.Now()}
	s.run(400, 1000, constant(10*time.Millisecond))
	before := l.Limit()
	long := time.Now().Add(-30 * time.Second)
	for range 1000 {
		if l.TryAcquire() {
			l.Release(long, false)
		}
	}
	if got := l.Limit(); got != before || l.InFlight() != 0 {
		t.Errorf("after 1000 cancelled calls: limit %d (was %d), in flight %d; want unchanged, 0", got, before, l.InFlight())
	}
}

func TestTryAcquireSheds(t *testing.T) {
	l := gradient.New(2, 10)
	if !l.TryAcquire() || !l.TryAcquire() {
		t.Fatal("free slots refused")
	}
	if l.TryAcquire() {
		t.Fatal("slot past the limit of 2 granted")
	}
	l.Release(time.Now(), true)
	if !l.TryAcquire() {
		t.Error("released slot refused")
	}
}
