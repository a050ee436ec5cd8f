// Package throttle is the adaptive client-side throttling of the Google SRE
// book (chapter "Handling Overload"): a client that sees its backend reject
// most of what it sends starts rejecting requests itself, locally, with
// probability
//
//	max(0, (requests − K·accepts) / (requests + 1))
//
// where requests and accepts are counted over a sliding window. With K = 2
// the client lets through about twice what the backend accepts, so a backend
// that is down receives a trickle of probes instead of the full retry load,
// and one that comes back sees the load rise as its accepts do.
//
// We keep it ourselves because no well-kept Go library offers it on its own:
// the implementations we know of are buried inside RPC frameworks (go-zero's
// breaker, Kratos' aegis "sre" breaker, gRPC's RLS client) and tied to their
// transports, config and metrics. It is small and fully tested here.
package throttle

import (
	"math/rand/v2"
	"sync"
	"time"
)

// K is the SRE book's multiplier: how many requests the client sends per
// request the backend accepts before it starts throttling.
const K = 2

// buckets is the number of slots the sliding window is cut into: counts age
// out one slot at a time.
const buckets = 10

type options struct {
	window time.Duration
	now    func() time.Time
	random func() float64
}

// Option configures a Throttle or a Group.
type Option func(*options)

// WithWindow sets the length of the sliding window over which requests and
// accepts are counted (default 2 minutes, as in the SRE book).
func WithWindow(d time.Duration) Option {
	return func(o *options) { o.window = d }
}

// WithClock sets the time source (for tests).
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.now = now }
}

// WithRandom sets the source of uniform numbers in [0, 1) that decides each
// rejection (for tests).
func WithRandom(random func() float64) Option {
	return func(o *options) { o.random = random }
}

func evaluate(opts []Option) options {
	o := options{window: 2 * time.Minute, now: time.Now, random: rand.Float64}
	for _, opt := range opts {
		opt(&o)
	}
	if o.window <= 0 {
		o.window = 2 * time.Minute
	}
	return o
}

// Throttle decides whether to send a request to one backend. It is safe for
// concurrent use.
type Throttle struct {
	o    options
	slot time.Duration

	mu       sync.Mutex
	requests [buckets]int64
	accepts  [buckets]int64
	// head is the index of the current slot, which began at headStart.
	head      int
	headStart time.Time
}

// New returns a Throttle with empty counts: it rejects nothing until
// requests go unaccepted.
func New(opts ...Option) *Throttle {
	o := evaluate(opts)
	return &Throttle{o: o, slot: o.window / buckets, headStart: o.now()}
}

// Allow counts a request and reports whether to send it. A request Allow
// refuses still counts as a request, as the SRE book has it: a client that
// keeps trying while the backend keeps failing throttles harder.
func (t *Throttle) Allow() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance()
	requests, accepts := t.sums()
	t.requests[t.head]++
	p := (float64(requests) - K*float64(accepts)) / float64(requests+1)
	return p <= 0 || t.o.random() >= p
}

// Accepted counts a request the backend accepted.
func (t *Throttle) Accepted() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance()
	t.accepts[t.head]++
}

// RejectProbability returns the probability with which Allow would refuse
// the next request.
func (t *Throttle) RejectProbability() float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance()
	requests, accepts := t.sums()
	return max(0, (float64(requests)-K*float64(accepts))/float64(requests+1))
}

// idle reports whether the window holds no counts.
func (t *Throttle) idle() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance()
	requests, accepts := t.sums()
	return requests == 0 && accepts == 0
}

// advance moves the head to the slot of now, clearing the slots it passes.
func (t *Throttle) advance() {
	elapsed := t.o.now().Sub(t.headStart)
	if elapsed < t.slot {
		return
	}
	steps := int(elapsed / t.slot)
	for i := range min(steps, buckets) {
		idx := (t.head + 1 + i) % buckets
		t.requests[idx], t.accepts[idx] = 0, 0
	}
	t.head = (t.head + steps) % buckets
	t.headStart = t.headStart.Add(time.Duration(steps) * t.slot)
}

func (t *Throttle) sums() (requests, accepts int64) {
	for i := range buckets {
		requests += t.requests[i]
		accepts += t.accepts[i]
	}
	return requests, accepts
}

// Group holds one Throttle per backend, made on first use and dropped once
// its window is empty. It is safe for concurrent use.
type Group struct {
	opts []Option
	o    options

	mu        sync.Mutex
	throttles map[string]*Throttle
	lastSweep time.Time
}

// NewGroup returns an empty Group whose throttles are made with opts.
func NewGroup(opts ...Option) *Group {
	o := evaluate(opts)
	return &Group{opts: opts, o: o, throttles: map[string]*Throttle{}, lastSweep: o.now()}
}

// Get returns the Throttle of backend.
func (g *Group) Get(backend string) *Throttle {
	g.mu.Lock()
	defer g.mu.Unlock()
	// Sweep at most once a window, so the map holds only backends seen
	// within about two windows.
	if now := g.o.now(); now.Sub(g.lastSweep) >= g.o.window {
		for k, t := range g.throttles {
			if k != backend && t.idle() {
				delete(g.throttles, k)
			}
		}
		g.lastSweep = now
	}
	t, ok := g.throttles[backend]
	if !ok {
		t = New(g.opts...)
		g.throttles[backend] = t
	}
	return t
}

// Len returns the number of backends the Group holds.
func (g *Group) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.throttles)
}
