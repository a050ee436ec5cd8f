package eventlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shebasvc/sheba/store"
)

// Options configures a Hub. Zero values pick the defaults.
type Options struct {
	// PollInterval is how often the hub reads the log when no
	// notification woke it (default 500ms): the floor under a lost
	// notification.
	PollInterval time.Duration
	// Buffer is how many events may wait for a subscriber before it is
	// cut with ErrTooSlow (default 256, events.buffer).
	Buffer int
	// PageSize is the most events one read of the log returns (default
	// 500); a subscriber catching up reads at most Buffer at a time.
	PageSize int
	// Retention is how far back a cursor or an event id can resume
	// (default 7 days, events.retention): the events older may be deleted.
	Retention time.Duration
	// Failover, if set, tells the listener that its connection predates
	// a switch of primary (store.Failover.Stale): it then reconnects.
	Failover *store.Failover
	// MaxBackoff bounds the wait between two attempts to listen again
	// after the listening connection failed (default 5s).
	MaxBackoff time.Duration
	// Log gets the hub's warnings; nil discards.
	Log *slog.Logger
	// Now is the clock of cursors (nil: time.Now); tests set it.
	Now func() time.Time
}

func (o *Options) setDefaults() {
	if o.PollInterval <= 0 {
		o.PollInterval = 500 * time.Millisecond
	}
	if o.Buffer <= 0 {
		o.Buffer = 256
	}
	if o.PageSize <= 0 {
		o.PageSize = 500
	}
	if o.Retention <= 0 {
		o.Retention = 7 * 24 * time.Hour
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Errors a Subscriber's Next returns.
var (
	// ErrTooSlow means the subscriber was cut: Options.Buffer events
	// waited for it.
	ErrTooSlow = errors.New("event subscriber too slow")
	// ErrClosed means the subscriber was closed.
	ErrClosed = errors.New("event subscriber closed")
	// ErrStopped means the hub stopped (its Run returned).
	ErrStopped = errors.New("event hub stopped")
)

// Hub follows the event log and hands new events to its subscribers. It
// is safe for concurrent use. Run drives it.
type Hub struct {
	st     *store.Store
	listen *pgxpool.Pool
	o      Options

	// wake asks Run to read the log now.
	wake chan struct{}
	// ready is closed once the hub knows its first position.
	ready chan struct{}

	mu sync.Mutex
	// pos is where the hub has read to: every event up to it has been
	// handed to the live subscribers it matches. Run moves it; while no
	// subscriber is live, the hub reads nothing (idle), and pos may be
	// moved on to any horizon (Subscribe, take), as no live subscriber
	// waits for the events it passes over.
	pos     Position
	subs    map[*Subscriber]struct{} // the live ones
	stopped bool
	// stale: Run passed over a read while no subscriber was live, so
	// pos may be behind the log (Subscribe brings it up to now).
	stale bool

	stats struct {
		reads, events, deliveries, cut, listens atomic.Int64
		subscribers                             atomic.Int64
	}
}

// New returns a Hub that reads the log through st and listens for its
// notifications on a connection of listen, which it holds while it runs
// (so listen needs one connection more than its other users); with a nil
// listen it only polls. It reads nothing until Run.
func New(st *store.Store, listen *pgxpool.Pool, o Options) *Hub {
	o.setDefaults()
	return &Hub{
		st:     st,
		listen: listen,
		o:      o,
		wake:   make(chan struct{}, 1),
		ready:  make(chan struct{}),
		subs:   map[*Subscriber]struct{}{},
	}
}

// Stats are counters of a Hub since it was made.
type Stats struct {
	// Reads is the number of reads of the log by the hub (catch-ups not
	// counted), Events the events they found, Deliveries the events
	// handed to live subscribers.
	Reads, Events, Deliveries int64
	// Cut is the number of subscribers cut for being too slow.
	Cut int64
	// Listens is the number of times the listener connected.
	Listens int64
	// Subscribers is the number open now.
	Subscribers int64
}

// Stats returns the hub's counters.
func (h *Hub) Stats() Stats {
	return Stats{
		Reads:       h.stats.reads.Load(),
		Events:      h.stats.events.Load(),
		Deliveries:  h.stats.deliveries.Load(),
		Cut:         h.stats.cut.Load(),
		Listens:     h.stats.listens.Load(),
		Subscribers: h.stats.subscribers.Load(),
	}
}

// kick wakes Run to read the log, unless it is already woken.
func (h *Hub) kick() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// Run follows the log until ctx ends, then ends every subscriber
// (ErrStopped) and returns nil. While the database does not answer, it
// keeps trying. Call it once.
func (h *Hub) Run(ctx context.Context) error {
	defer h.stop()
	start, err := h.start(ctx)
	if err != nil {
		return nil // ctx ended
	}
	h.mu.Lock()
	h.pos = start
	h.mu.Unlock()
	close(h.ready)

	var wg sync.WaitGroup
	defer wg.Wait()
	if h.listen != nil {
		wg.Go(func() { h.listenLoop(ctx) })
	}
	t := time.NewTicker(h.o.PollInterval)
	defer t.Stop()
	// A read woken by a notification may find the new event above the
	// horizon, held back by a transaction still running elsewhere: the
	// hub then reads again every heldRetry until a read is not held back,
	// rather than waiting for the poll floor.
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	failing, woken := false, false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-h.wake:
			woken = true
		case <-retry.C:
		case <-t.C:
		}
		if h.idle() {
			// Nobody to hand events to: no query, on a replica whose
			// clients watch nothing.
			woken = false
			continue
		}
		held, err := h.advance(ctx)
		switch {
		case err == nil && !held:
			woken = false
		case err == nil && woken:
			retry.Reset(heldRetry)
		}
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil && !failing:
			h.o.Log.WarnContext(ctx, "event log not read; retrying", "error", err)
		case err == nil && failing:
			h.o.Log.InfoContext(ctx, "event log read again")
		}
		failing = err != nil
	}
}

// start returns the hub's first position: the horizon now, so that it
// hands on the events that commit from now on.
func (h *Hub) start(ctx context.Context) (Position, error) {
	wait := 100 * time.Millisecond
	for {
		hz, err := h.st.EventHorizon(ctx)
		if err == nil {
			return Position{Xid: hz}, nil
		}
		h.o.Log.WarnContext(ctx, "event log not read; retrying", "error", err)
		select {
		case <-ctx.Done():
			return Position{}, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, h.o.MaxBackoff)
	}
}

// stop ends every subscriber and refuses new ones.
func (h *Hub) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	for s := range h.subs {
		s.end(ErrStopped)
	}
	clear(h.subs)
	select {
	case <-h.ready:
	default:
		close(h.ready)
	}
}

// idle reports whether no subscriber is live, and if so marks pos stale.
func (h *Hub) idle() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.subs) > 0 {
		return false
	}
	h.stale = true
	return true
}

// heldRetry is how soon a read woken by a notification and held back by
// a running transaction is made again.
const heldRetry = 50 * time.Millisecond

// maxPagesPerWake bounds the pages one wake-up reads before the hub looks
// at ctx again; it wakes itself to read the rest.
const maxPagesPerWake = 20

// advance reads the log after the hub's position, page by page up to the
// horizon, and hands each event to the live subscribers it matches. One
// query a page, however many subscribers. It reports whether its last read
// was held back by a running transaction (store.EventPage.HeldBack).
func (h *Hub) advance(ctx context.Context) (heldBack bool, err error) {
	for range maxPagesPerWake {
		h.mu.Lock()
		from := h.pos
		h.mu.Unlock()
		page, err := h.st.ListEvents(ctx, from, nil, h.o.PageSize)
		if err != nil {
			return false, err
		}
		h.stats.reads.Add(1)
		h.stats.events.Add(int64(len(page.Events)))
		events := h.decodeAll(ctx, page.Events)
		to := reached(from, page, h.o.PageSize)
		h.mu.Lock()
		if h.pos != from {
			// Moved on while no subscriber was live (Subscribe, take):
			// this read is behind it.
			h.mu.Unlock()
			continue
		}
		h.stale = false
		for _, e := range events {
			for s := range h.subs {
				if s.offer(e) {
					h.stats.deliveries.Add(1)
				} else if s.cut() {
					delete(h.subs, s)
					h.stats.cut.Add(1)
				}
			}
		}
		h.pos = to
		for s := range h.subs {
			s.advance(to)
		}
		h.mu.Unlock()
		if len(page.Events) < h.o.PageSize {
			return page.HeldBack, nil
		}
	}
	h.kick()
	return false, nil
}

// reached is the position a read from from that returned page (asked for
// limit events) reached: its last event's, or, if it found fewer than
// asked, (horizon, 0), past every event it could have returned.
func reached(from Position, page store.EventPage, limit int) Position {
	to := from
	if n := len(page.Events); n > 0 {
		to = page.Events[n-1].Position
	}
	if len(page.Events) < limit {
		if hz := (Position{Xid: page.Horizon}); to.Less(hz) {
			to = hz
		}
	}
	return to
}

// decodeAll decodes the events of a page, leaving out (with a log line)
// any whose body cannot be read: it cannot be sent as it is.
func (h *Hub) decodeAll(ctx context.Context, rows []store.LogEvent) []*Event {
	events := make([]*Event, 0, len(rows))
	for _, le := range rows {
		e, err := decode(le)
		if err != nil {
			h.o.Log.ErrorContext(ctx, "event left out of the stream", "event_id", le.ID, "error", err)
			continue
		}
		events = append(events, e)
	}
	return events
}

// Subscribe returns a subscriber of the events of the given types (every
// type when empty) after position after, or, when after is nil, of those
// the hub has not read yet (the events committed from about now on). It
// waits until Run has started. The caller must Close it.
func (h *Hub) Subscribe(ctx context.Context, types []string, after *Position) (*Subscriber, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-h.ready:
	}
	if err := h.refresh(ctx); err != nil {
		return nil, err
	}
	s := &Subscriber{h: h, types: slices.Clone(types), notify: make(chan struct{}, 1), q: ring{max: h.o.Buffer}}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return nil, ErrStopped
	}
	h.stats.subscribers.Add(1)
	if after == nil {
		s.tail, s.consumed = h.pos, h.pos
	} else {
		s.tail, s.consumed = *after, *after
	}
	// A subscriber at or past the hub's position has read all the hub
	// has; one behind it catches up first (Subscriber.catchUp).
	if !s.tail.Less(h.pos) {
		s.live = true
		h.subs[s] = struct{}{}
	}
	return s, nil
}

// refresh brings a stale pos (the hub idle) up to the log's horizon now, so
// that a subscriber from now starts now, and the hub does not read again
// what was written while it was idle: one query, when the first
// subscriber comes after a while without any.
func (h *Hub) refresh(ctx context.Context) error {
	h.mu.Lock()
	stale := h.stale && len(h.subs) == 0
	h.mu.Unlock()
	if !stale {
		return nil
	}
	hz, err := h.st.EventHorizon(ctx)
	if err != nil {
		return fmt.Errorf("event log horizon: %w", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if now := (Position{Xid: hz}); len(h.subs) == 0 && h.pos.Less(now) {
		h.pos = now
		h.stale = false
	}
	return nil
}

// ParseAfter returns the position an `after` given by a client names: nil
// for "" (from now), the position of an event id, or that of a cursor
// (Cursor). It returns ErrCursorExpired for an event not kept, one older
// than the retention, a cursor issued longer ago than the retention (or
// more than a minute in the future), or anything else.
func (h *Hub) ParseAfter(ctx context.Context, after string) (*Position, error) {
	if after == "" {
		return nil, nil
	}
	now := h.o.Now()
	if p, issued, ok := parseCursor(after); ok {
		if issued.Before(now.Add(-h.o.Retention)) || issued.After(now.Add(time.Minute)) {
			return nil, ErrCursorExpired
		}
		return &p, nil
	}
	p, created, err := h.st.GetEventPosition(ctx, after)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, ErrCursorExpired
	case err != nil:
		return nil, err
	case created.Before(now.Add(-h.o.Retention)):
		// Kept only while a delivery is pending: the events after it may
		// be gone.
		return nil, ErrCursorExpired
	}
	return &p, nil
}

// Cursor returns the cursor of p, issued now.
func (h *Hub) Cursor(p Position) string { return Cursor(p, h.o.Now()) }

// Subscriber receives the events of its types in the log's order, from a
// Hub. Next, Position and Close serve one reader: the stream that owns it.
type Subscriber struct {
	h      *Hub
	types  []string
	notify chan struct{} // a wake-up of Next, after an event or an end

	mu sync.Mutex
	// q holds the events handed to the subscriber that Next has not
	// returned yet; it is made at the first, with room for Buffer.
	q ring
	// tail: every event of the subscriber's types up to it has been
	// returned by Next or is in q. consumed is the position of the last
	// event Next returned, or the tail a Position call found with nothing
	// waiting (or where it started).
	tail, consumed Position
	// live: the hub hands it events; else it catches up by itself.
	live bool
	err  error // why it ended; nil while it runs
}

// matches reports whether the subscriber receives events of type t.
func (s *Subscriber) matches(t string) bool {
	return len(s.types) == 0 || slices.Contains(s.types, t)
}

// offer queues e if it matches and comes after the tail. It returns false
// if the queue is full: the hub then cuts the subscriber. Called with the
// hub locked.
func (s *Subscriber) offer(e *Event) bool {
	if !s.matches(e.Type) {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.tail.Less(e.Position) || s.err != nil {
		return true // read by its catch-up already
	}
	if !s.q.push(e) {
		return false
	}
	s.tail = e.Position
	s.signal()
	return true
}

// advance moves the tail of a live subscriber to p, where the hub has
// read to: so its Position moves on without an event of its types.
// Called with the hub locked.
func (s *Subscriber) advance(p Position) {
	s.mu.Lock()
	if s.tail.Less(p) {
		s.tail = p
	}
	s.mu.Unlock()
}

// cut ends a subscriber that does not keep up, and reports whether it was
// running. Called with the hub locked.
func (s *Subscriber) cut() bool { return s.end(ErrTooSlow) }

// end ends the subscriber with err, dropping what waits for it, and
// reports whether it was running.
func (s *Subscriber) end(err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false
	}
	s.err = err
	s.live = false
	s.q = ring{}
	s.h.stats.subscribers.Add(-1)
	s.signal()
	return true
}

func (s *Subscriber) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Position returns where the subscriber stands, for a heartbeat: every
// event of its types up to it has been returned by Next. While none waits
// it moves on with the hub, events of its types or not.
func (s *Subscriber) Position() Position {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.q.len() == 0 {
		// Everything up to the tail was returned: a later position
		// never goes back before it, once an event waits again.
		s.consumed = s.tail
	}
	return s.consumed
}

// Next returns the next event, waiting for one until ctx ends (then it
// returns ctx's error, and the subscriber goes on). It returns ErrTooSlow
// once the subscriber was cut, ErrClosed after Close, ErrStopped once the
// hub stopped, and a store error if a catch-up read failed (the
// subscriber goes on; the next call reads again).
//
// A subscriber behind the hub reads the log itself, a page at a time,
// after its tail, its types only, up to its read's horizon; it joins the
// hub's live feed once its tail is at or past the hub's position (checked
// with the hub locked, so the hub reads nothing meanwhile). The hub hands
// it only events after its tail, so the events between the hub's position
// and its tail, which its catch-up returned, do not come twice, and none
// after the hub's position is missed.
func (s *Subscriber) Next(ctx context.Context) (*Event, error) {
	for {
		s.mu.Lock()
		if e, ok := s.q.pop(); ok {
			s.consumed = e.Position
			s.mu.Unlock()
			return e, nil
		}
		err, live := s.err, s.live
		s.mu.Unlock()
		switch {
		case err != nil:
			return nil, err
		case !live:
			if err := s.catchUp(ctx); err != nil {
				return nil, err
			}
			continue
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// catchUp reads the next page of the log after the tail, or joins the
// live feed.
func (s *Subscriber) catchUp(ctx context.Context) error {
	h := s.h
	s.mu.Lock()
	from := s.tail
	s.mu.Unlock()
	limit := min(h.o.PageSize, h.o.Buffer)
	page, err := h.st.ListEvents(ctx, from, s.types, limit)
	if err != nil {
		return fmt.Errorf("catch up: %w", err)
	}
	if behind := s.take(h.decodeAll(ctx, page.Events), reached(from, page, limit), len(page.Events) == limit); behind && len(page.Events) == 0 {
		// Nothing new below this read's horizon, yet the hub is past it:
		// the hub read after it. Look again soon rather than at once.
		t := time.NewTimer(catchUpRetry)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return nil
}

// take queues the events of a catch-up read that reached to, and joins
// the live feed unless the read was full (more follow) or the hub is past
// to; it reports whether the subscriber is still behind. The catch-up
// starts with an empty queue, and reads no more than the queue holds.
func (s *Subscriber) take(events []*Event, to Position, full bool) (behind bool) {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		s.end(ErrStopped)
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false
	}
	for _, e := range events {
		s.q.push(e)
	}
	s.tail = to
	if full || to.Less(h.pos) {
		return true
	}
	if len(h.subs) == 0 {
		// No live subscriber waits for the hub's reads up to to: it
		// need not read them.
		h.pos = to
	}
	s.live = true
	h.subs[s] = struct{}{}
	return false
}

// catchUpRetry is how long a catch-up that found nothing while the hub is
// ahead waits before it reads again.
const catchUpRetry = 10 * time.Millisecond

// Close ends the subscriber and releases what it holds. Next then returns
// ErrClosed (unless it had ended already).
func (s *Subscriber) Close() {
	s.h.mu.Lock()
	delete(s.h.subs, s)
	s.h.mu.Unlock()
	s.end(ErrClosed)
}

// ring is a FIFO queue of at most max events, its room made at the first
// push: an idle subscriber that never got one holds none.
type ring struct {
	buf             []*Event
	head, size, max int
}

func (r *ring) len() int { return r.size }

// push adds e unless max events wait already.
func (r *ring) push(e *Event) bool {
	if r.size >= r.max {
		return false
	}
	if r.buf == nil {
		r.buf = make([]*Event, r.max)
	}
	r.buf[(r.head+r.size)%len(r.buf)] = e
	r.size++
	return true
}

func (r *ring) pop() (*Event, bool) {
	if r.size == 0 {
		return nil, false
	}
	e := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % len(r.buf)
	r.size--
	return e, true
}
