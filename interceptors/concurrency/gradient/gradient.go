package gradient

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

type options struct {
	window      time.Duration
	minSamples  int
	longWindows int
	tolerance   float64
	smoothing   float64
	onChange    func(limit int)
}

// Option configures a Limiter.
type Option func(*options)

// WithWindow sets the shortest window of calls that makes one update
// (default 50 ms) and the fewest calls in it (default 10).
func WithWindow(d time.Duration, minSamples int) Option {
	return func(o *options) { o.window, o.minSamples = d, minSamples }
}

// WithLongWindows sets over how many windows the long-term latency rises
// towards a higher short-term one (default 6000, five minutes of 50 ms
// windows).
func WithLongWindows(n int) Option {
	return func(o *options) { o.longWindows = n }
}

// WithTolerance sets how far above the long-term latency the short-term
// one may go before the limit shrinks (default 1.5).
func WithTolerance(t float64) Option {
	return func(o *options) { o.tolerance = t }
}

// WithOnChange calls f with each new limit (for a log line or a test).
func WithOnChange(f func(limit int)) Option {
	return func(o *options) { o.onChange = f }
}

// Limiter is an adaptive concurrency limit that implements
// concurrency.Limiter. It is safe for concurrent use.
type Limiter struct {
	opts     options
	min, max float64
	inflight atomic.Int64
	limit    atomic.Int64 // the current limit, read on every TryAcquire

	mu sync.Mutex
	// Guarded by mu.
	current     float64 // the limit before rounding
	longRTT     float64 // ns; 0 until the first window
	windowStart time.Time
	sum         float64 // ns, of the window's calls
	count       int
	maxInflight int64
}

// New returns a Limiter between min and max, starting at min: it grows as
// long as the latency it measures allows.
func New(min, max int, opts ...Option) *Limiter {
	o := options{window: 50 * time.Millisecond, minSamples: 10, longWindows: 6000, tolerance: 1.5, smoothing: 0.2, onChange: func(int) {}}
	for _, opt := range opts {
		opt(&o)
	}
	l := &Limiter{opts: o, min: float64(min), max: float64(max), current: float64(min)}
	l.limit.Store(int64(min))
	return l
}

// Limit returns the current limit.
func (l *Limiter) Limit() int { return int(l.limit.Load()) }

// InFlight returns the number of calls running now.
func (l *Limiter) InFlight() int64 { return l.inflight.Load() }

// TryAcquire takes a slot if fewer calls than the limit run; it never
// waits.
func (l *Limiter) TryAcquire() bool {
	if l.inflight.Add(1) > l.limit.Load() {
		l.inflight.Add(-1)
		return false
	}
	return true
}

// Release frees a slot and, for a measured call, learns from its latency.
func (l *Limiter) Release(start time.Time, measured bool) {
	inflight := l.inflight.Add(-1) + 1
	if measured {
		now := time.Now()
		l.Observe(now, now.Sub(start), inflight)
	}
}

// Observe records one call that took rtt and ended at now with inflight
// calls running (itself included), and updates the limit when a window
// is complete. Release calls it; tests call it with a simulated clock.
func (l *Limiter) Observe(now time.Time, rtt time.Duration, inflight int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.windowStart.IsZero() {
		l.windowStart = now
	}
	l.sum += float64(rtt)
	l.count++
	l.maxInflight = max(l.maxInflight, inflight)
	if l.count < l.opts.minSamples || now.Sub(l.windowStart) < l.opts.window {
		return
	}
	short := l.sum / float64(l.count)
	peak := l.maxInflight
	l.windowStart, l.sum, l.count, l.maxInflight = now, 0, 0, 0
	l.update(max(short, 1), peak)
}

// update is one step of Gradient2 with the window's mean latency short
// (ns) and the most calls seen in flight during it.
func (l *Limiter) update(short float64, peak int64) {
	// The long-term latency is the baseline the short one is held to. It
	// falls fast (a tenth of the way each window) and rises slowly (over
	// longWindows windows): in Gradient2's symmetric average, sustained
	// overload soon becomes the baseline and the limit drifts up until
	// admitted calls queue again.
	switch {
	case l.longRTT == 0:
		l.longRTT = short
	case short < l.longRTT:
		l.longRTT += (short - l.longRTT) * 0.1
	default:
		l.longRTT += (short - l.longRTT) / float64(l.opts.longWindows)
	}
	gradient := max(0.5, min(1, l.opts.tolerance*l.longRTT/short))
	next := l.current*gradient + math.Sqrt(l.current)
	next = l.current*(1-l.opts.smoothing) + next*l.opts.smoothing
	next = max(l.min, min(l.max, next))
	// Under half the limit in use: the latency says nothing about a
	// higher limit, so it is not raised.
	if next > l.current && float64(peak) < l.current/2 {
		return
	}
	old := int64(l.current)
	l.current = next
	if n := int64(next); n != old {
		l.limit.Store(n)
		l.opts.onChange(int(n))
	}
}
