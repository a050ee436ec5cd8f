package eventlog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
	"github.com/shebasvc/sheba/webhooks"
	"github.com/shebasvc/sheba/webhooks/eventlog"
)

func TestMain(m *testing.M) { os.Exit(storetest.Run(m)) }

// bed is a fresh database with a pool large enough for the writers of a
// test, the hub's reads and its listener.
type bed struct {
	pool *pgxpool.Pool
	st   *store.Store
}

func newBed(t *testing.T) *bed {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(storetest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &bed{pool: pool, st: store.New(pool)}
}

// hub starts a hub over the bed with o (listening unless noListen) that
// runs until the test ends.
func (b *bed) hub(t *testing.T, o eventlog.Options, noListen bool) *eventlog.Hub {
	t.Helper()
	listen := b.pool
	if noListen {
		listen = nil
	}
	h := eventlog.New(b.st, listen, o)
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return h
}

// body is a webhook body of an event of type typ about a resource named n.
func body(typ string, n int) []byte {
	b, _ := json.Marshal(map[string]any{"type": typ, "timestamp": time.Now().UTC().Format(time.RFC3339Nano), "data": map[string]any{"n": n}})
	return b
}

// publish writes an event of type typ in ctx's transaction (store.InTx),
// as webhooks.Runner.Publish does, and returns its id.
func (b *bed) publish(ctx context.Context, t testing.TB, typ string, n int) string {
	t.Helper()
	id := uuid.NewString()
	if err := b.st.CreateWebhookEvent(ctx, store.WebhookEvent{ID: id, Type: typ, Body: body(typ, n), CreateTime: time.Now().UTC()}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	return id
}

func subscribe(t *testing.T, h *eventlog.Hub, types []string, after *eventlog.Position) *eventlog.Subscriber {
	t.Helper()
	s, err := h.Subscribe(t.Context(), types, after)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// next returns the next event of s, failing the test if none comes within
// d.
func next(t *testing.T, s *eventlog.Subscriber, d time.Duration) *eventlog.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	e, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return e
}

// none checks that no event comes to s within d.
func none(t *testing.T, s *eventlog.Subscriber, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	if e, err := s.Next(ctx); err == nil {
		t.Fatalf("Next: got event %s (%s), want none", e.ID, e.Type)
	}
}

// TestResumeNoGap: writers publish concurrently in transactions of varying
// lengths, some held open while others commit, so that transactions commit
// out of the order of their ids and of their events' seq. One subscriber
// never stops; another closes after a few events, or after a silence, and
// subscribes again after the last position it held (an event's or its
// heartbeat's). Both must receive every committed event, in the same
// order: positions are exact, so the resumer gets no repeat at all (the
// contract allows at-least-once at resume boundaries; this
// implementation gives exactly once). A read in seq order alone fails it.
func TestResumeNoGap(t *testing.T) {
	t.Parallel()
	b := newBed(t)
	// Small pages, so that catch-ups and the hub page.
	h := b.hub(t, eventlog.Options{PollInterval: 50 * time.Millisecond, PageSize: 5, Buffer: 1000}, false)
	cont := subscribe(t, h, nil, nil)
	start := cont.Position()

	const writers, perWriter = 6, 25
	var (
		mu        sync.Mutex
		published []string
		wg        sync.WaitGroup
	)
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				// One transaction in five is held open a while, with
				// another event written at its end, while the others
				// commit.
				hold := time.Duration(rand.IntN(20)) * time.Millisecond
				if rand.IntN(5) == 0 {
					hold = time.Duration(200+rand.IntN(300)) * time.Millisecond
				}
				var ids []string
				err := b.st.InTx(t.Context(), func(ctx context.Context) error {
					ids = append(ids, b.publish(ctx, t, "t", w*1000+i))
					time.Sleep(hold)
					if rand.IntN(2) == 0 {
						ids = append(ids, b.publish(ctx, t, "t", w*1000+i+500))
					}
					return nil
				})
				if err != nil {
					t.Errorf("InTx: %v", err)
					return
				}
				mu.Lock()
				published = append(published, ids...)
				mu.Unlock()
			}
		})
	}
	writersDone := make(chan struct{})
	go func() { wg.Wait(); close(writersDone) }()
	// total is the number of events once the writers are done.
	total := func() int {
		select {
		case <-writersDone:
			mu.Lock()
			defer mu.Unlock()
			return len(published)
		default:
			return -1
		}
	}
	deadline := time.Now().Add(2 * time.Minute)

	// The continuous reader.
	var got []string
	contDone := make(chan struct{})
	go func() {
		defer close(contDone)
		for len(got) != total() && time.Now().Before(deadline) {
			ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
			e, err := cont.Next(ctx)
			cancel()
			if errors.Is(err, context.DeadlineExceeded) {
				continue
			}
			if err != nil {
				t.Errorf("Next: %v", err)
				return
			}
			got = append(got, e.ID)
		}
	}()

	// The resumer: a few events at a time, or a silence, then it resumes
	// after the last position it was given.
	var resumed []string
	pos := start
	resumes, fromHeartbeat := 0, 0
	for len(resumed) != total() && time.Now().Before(deadline) {
		s, err := h.Subscribe(t.Context(), nil, &pos)
		if err != nil {
			t.Fatalf("Subscribe: %v", err)
		}
		resumes++
		for range 1 + rand.IntN(6) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Duration(20+rand.IntN(100))*time.Millisecond)
			e, err := s.Next(ctx)
			cancel()
			if errors.Is(err, context.DeadlineExceeded) {
				// A heartbeat: the position it would carry.
				pos = s.Position()
				fromHeartbeat++
				break
			}
			if err != nil {
				t.Fatalf("Next: %v", err)
			}
			resumed = append(resumed, e.ID)
			pos = e.Position
		}
		s.Close()
	}
	<-contDone

	mu.Lock()
	defer mu.Unlock()
	seen := map[string]bool{}
	for _, id := range got {
		if seen[id] {
			t.Errorf("continuous reader: event %s twice", id)
		}
		seen[id] = true
	}
	for _, id := range published {
		if !seen[id] {
			t.Errorf("continuous reader: missed event %s", id)
		}
	}
	if diff := cmp.Diff(got, resumed); diff != "" {
		t.Errorf("resumed reader's events differ from the continuous reader's (-continuous +resumed):\n%s", diff)
	}
	t.Logf("%d events published, %d read continuously, %d by the resumer over %d resumes (%d after a heartbeat)",
		len(published), len(got), len(resumed), resumes, fromHeartbeat)
}

// TestLatency: an event reaches a live subscriber soon after its commit,
// woken by the notification (the poll floor set to an hour, so only it
// can wake the hub), and with no listener, by the poll floor alone. The
// bounds are generous; the figures are logged.
func TestLatency(t *testing.T) {
	t.Parallel()
	for _, test := range []struct {
		name     string
		o        eventlog.Options
		noListen bool
	}{
		{"notification", eventlog.Options{PollInterval: time.Hour}, false},
		{"poll floor", eventlog.Options{}, true},
	} {
		t.Run(test.name, func(t *testing.T) {
			t.Parallel()
			b := newBed(t)
			h := b.hub(t, test.o, test.noListen)
			s := subscribe(t, h, nil, nil)
			var worst time.Duration
			for i := range 5 {
				id := b.publish(t.Context(), t, "t", i)
				committed := time.Now()
				e := next(t, s, 10*time.Second)
				if e.ID != id {
					t.Fatalf("got event %s, want %s", e.ID, id)
				}
				worst = max(worst, time.Since(committed))
			}
			t.Logf("slowest of 5: %v", worst)
			if worst > 3*time.Second {
				t.Errorf("slowest event took %v from commit to subscriber, want about 1s at most", worst)
			}
		})
	}
}

// TestTypeFilter: a subscriber gets the events of its types only, and its
// position moves on past the others.
func TestTypeFilter(t *testing.T) {
	t.Parallel()
	b := newBed(t)
	h := b.hub(t, eventlog.Options{PollInterval: 20 * time.Millisecond}, false)
	s := subscribe(t, h, []string{"a", "c"}, nil)
	all := subscribe(t, h, nil, nil)
	var want []string
	for i, typ := range []string{"a", "b", "c", "b"} {
		id := b.publish(t.Context(), t, typ, i)
		if typ != "b" {
			want = append(want, typ+" "+id)
		}
	}
	var got []string
	for range want {
		e := next(t, s, 10*time.Second)
		got = append(got, e.Type+" "+e.ID)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("filtered events (-want +got):\n%s", diff)
	}
	var last eventlog.Position
	for range 4 {
		last = next(t, all, 10*time.Second).Position
	}
	none(t, s, 200*time.Millisecond)
	if p := s.Position(); p.Less(last) {
		t.Errorf("filtered subscriber's position %v is before the last event %v: its heartbeat would not move on", p, last)
	}
}

// TestSlowSubscriberCut: a subscriber that does not read is cut once its
// buffer is full, and one that reads keeps getting every event.
func TestSlowSubscriberCut(t *testing.T) {
	t.Parallel()
	b := newBed(t)
	h := b.hub(t, eventlog.Options{PollInterval: 20 * time.Millisecond, Buffer: 4}, false)
	slow := subscribe(t, h, nil, nil)
	fast := subscribe(t, h, nil, nil)
	for i := range 10 {
		id := b.publish(t.Context(), t, "t", i)
		if e := next(t, fast, 10*time.Second); e.ID != id {
			t.Fatalf("fast subscriber: got %s, want %s", e.ID, id)
		}
	}
	if _, err := slow.Next(t.Context()); !errors.Is(err, eventlog.ErrTooSlow) {
		t.Errorf("slow subscriber: got %v, want ErrTooSlow", err)
	}
	if st := h.Stats(); st.Cut != 1 || st.Subscribers != 1 {
		t.Errorf("got %d cut and %d open, want 1 and 1", st.Cut, st.Subscribers)
	}
}

// TestCatchUp: a subscriber from an old position reads what it missed,
// page by page, then the live events, without gap or repeat.
func TestCatchUp(t *testing.T) {
	t.Parallel()
	b := newBed(t)
	h := b.hub(t, eventlog.Options{PollInterval: 20 * time.Millisecond, PageSize: 3, Buffer: 16}, false)
	first := subscribe(t, h, nil, nil)
	start := first.Position()
	first.Close()
	// A live subscriber of another type, so that the hub reads on.
	subscribe(t, h, []string{"other"}, nil)
	var want []string
	for i := range 20 {
		want = append(want, b.publish(t.Context(), t, "t", i))
	}
	// The hub has read them all.
	for i := 0; h.Stats().Events < 20; i++ {
		if i == 1000 {
			t.Fatalf("the hub read %d events in 10s, want 20", h.Stats().Events)
		}
		time.Sleep(10 * time.Millisecond)
	}
	late := subscribe(t, h, nil, &start)
	var got []string
	for i := range 30 {
		got = append(got, next(t, late, 10*time.Second).ID)
		if i == 10 {
			// Live events while it catches up.
			for j := range 10 {
				want = append(want, b.publish(t.Context(), t, "t", 100+j))
			}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	none(t, late, 200*time.Millisecond)
}

// TestIdleHub: a hub without a live subscriber reads nothing, however
// many events are written and notified; a subscriber from now then gets
// none of those, only what comes after it; and one resuming after a
// position from before the idle time gets every event written meanwhile,
// in order.
func TestIdleHub(t *testing.T) {
	t.Parallel()
	b := newBed(t)
	const poll = 20 * time.Millisecond
	h := b.hub(t, eventlog.Options{PollInterval: poll}, false)
	var idle []string
	for i := range 5 {
		idle = append(idle, b.publish(t.Context(), t, "t", i))
	}
	time.Sleep(20 * poll)
	if got := h.Stats().Reads; got != 0 {
		t.Fatalf("before any subscriber: the hub read the log %d times, want 0", got)
	}

	s := subscribe(t, h, nil, nil)
	want := b.publish(t.Context(), t, "t", 10)
	// Those written while idle are behind the horizon the subscriber
	// starts at, unless a transaction elsewhere in the cluster (another
	// test's) held the horizon back since: then some may come first.
	early := 0
	for got := next(t, s, 10*time.Second); got.ID != want; got = next(t, s, 10*time.Second) {
		if !slices.Contains(idle, got.ID) || early == len(idle) {
			t.Fatalf("the first subscriber got %s, want the event written after it (%s)", got.ID, want)
		}
		early++
	}
	if early > 0 {
		t.Logf("%d of the events written while the hub was idle came first (the horizon was held back)", early)
	}
	if h.Stats().Reads == 0 {
		t.Error("the hub read nothing with a subscriber")
	}
	pos := s.Position()
	s.Close()
	time.Sleep(5 * poll) // a read in flight at the close
	var written []string
	before := h.Stats().Reads
	for i := range 5 {
		written = append(written, b.publish(t.Context(), t, "t", 20+i))
	}
	time.Sleep(20 * poll)
	if got := h.Stats().Reads; got != before {
		t.Fatalf("after the last subscriber left: the hub read the log %d times, want 0", got-before)
	}

	resumed := subscribe(t, h, nil, &pos)
	var got []string
	for range written {
		got = append(got, next(t, resumed, 10*time.Second).ID)
	}
	if diff := cmp.Diff(written, got); diff != "" {
		t.Errorf("resumed after the idle time (-want +got):\n%s", diff)
	}
	none(t, resumed, 10*poll)
}

// TestParseAfter: cursors come back as their position; event ids as
// theirs; anything not issued, unknown or past the retention is expired.
func TestParseAfter(t *testing.T) {
	t.Parallel()
	b := newBed(t)
	now := time.Now()
	clock := func() time.Time { return now }
	h := b.hub(t, eventlog.Options{Retention: time.Hour, Now: clock}, true)
	id := b.publish(t.Context(), t, "t", 1)
	old := b.publish(t.Context(), t, "t", 2)
	if _, err := b.pool.Exec(t.Context(), `UPDATE webhook_events SET create_time = now() - interval '2 hours' WHERE id = $1`, old); err != nil {
		t.Fatal(err)
	}
	pos, _, err := b.st.GetEventPosition(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	p := eventlog.Position{Xid: 123456789012, Seq: 42}
	for _, test := range []struct {
		name, after string
		want        *eventlog.Position
		err         error
	}{
		{"empty: from now", "", nil, nil},
		{"a cursor", h.Cursor(p), &p, nil},
		{"a cursor issued 59 minutes ago", eventlog.Cursor(p, now.Add(-59*time.Minute)), &p, nil},
		{"a cursor issued past the retention", eventlog.Cursor(p, now.Add(-61*time.Minute)), nil, eventlog.ErrCursorExpired},
		{"a cursor from the future", eventlog.Cursor(p, now.Add(time.Hour)), nil, eventlog.ErrCursorExpired},
		{"a cursor cut short", h.Cursor(p)[:10], nil, eventlog.ErrCursorExpired},
		{"garbage", "hello", nil, eventlog.ErrCursorExpired},
		{"an event id", id, &pos, nil},
		{"an unknown event id", uuid.NewString(), nil, eventlog.ErrCursorExpired},
		{"an event past the retention", old, nil, eventlog.ErrCursorExpired},
	} {
		t.Run(test.name, func(t *testing.T) {
			got, err := h.ParseAfter(t.Context(), test.after)
			if !errors.Is(err, test.err) {
				t.Fatalf("got error %v, want %v", err, test.err)
			}
			if diff := cmp.Diff(test.want, got); diff != "" {
				t.Errorf("position (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHeartbeatCursorResumes: the cursor of an idle subscriber's position
// resumes after everything before it and before nothing after it.
func TestHeartbeatCursorResumes(t *testing.T) {
	t.Parallel()
	b := newBed(t)
	h := b.hub(t, eventlog.Options{PollInterval: 20 * time.Millisecond}, false)
	s := subscribe(t, h, nil, nil)
	b.publish(t.Context(), t, "t", 1)
	next(t, s, 10*time.Second)
	none(t, s, 100*time.Millisecond)
	cursor := h.Cursor(s.Position())
	s.Close()
	id := b.publish(t.Context(), t, "t", 2)
	after, err := h.ParseAfter(t.Context(), cursor)
	if err != nil {
		t.Fatal(err)
	}
	r := subscribe(t, h, nil, after)
	if e := next(t, r, 10*time.Second); e.ID != id {
		t.Errorf("resumed from the heartbeat's cursor: got %s, want %s", e.ID, id)
	}
	none(t, r, 100*time.Millisecond)
}

// TestListenerReconnect: the listening connection is terminated; the hub
// listens again, and the event committed meanwhile arrives. The poll floor
// is an hour: only the listener can bring it.
func TestListenerReconnect(t *testing.T) {
	t.Parallel()
	b := newBed(t)
	h := b.hub(t, eventlog.Options{PollInterval: time.Hour, MaxBackoff: 200 * time.Millisecond}, false)
	s := subscribe(t, h, nil, nil)
	b.publish(t.Context(), t, "t", 0)
	next(t, s, 10*time.Second)
	var n int
	if err := b.pool.QueryRow(t.Context(), `
		SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("terminate the listener: got %d, %v, want 1 terminated", n, err)
	}
	var want []string
	for i := range 3 {
		want = append(want, b.publish(t.Context(), t, "t", i+1))
		time.Sleep(50 * time.Millisecond)
	}
	var got []string
	for range want {
		got = append(got, next(t, s, 10*time.Second).ID)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if l := h.Stats().Listens; l < 2 {
		t.Errorf("got %d listens, want 2 or more", l)
	}
}

// TestMemoryPerSubscriber opens 1,000 idle subscribers and reports the
// heap each holds, idle and once an event came (its queue made).
func TestMemoryPerSubscriber(t *testing.T) {
	b := newBed(t)
	h := b.hub(t, eventlog.Options{PollInterval: 20 * time.Millisecond}, false)
	const n = 1000
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	subs := make([]*eventlog.Subscriber, n)
	for i := range subs {
		subs[i] = subscribe(t, h, []string{"t", fmt.Sprint("type", i%4)}, nil)
	}
	idle := heap()
	b.publish(t.Context(), t, "t", 1)
	for _, s := range subs {
		next(t, s, 10*time.Second)
	}
	after := heap()
	perIdle := float64(idle-before) / n
	perUsed := float64(after-before) / n
	t.Logf("bytes per subscriber: %.0f idle, %.0f once an event came (queue of 256 made)", perIdle, perUsed)
	if perUsed > 64<<10 {
		t.Errorf("got %.0f bytes per subscriber, want at most 64 KiB", perUsed)
	}
	runtime.KeepAlive(subs)
}

// TestEventWithoutEndpointKept: an event no endpoint receives is fanned
// out by the webhook runner and kept all the same, and a subscriber from
// before it receives it, with the resource's REST JSON as its data.
func TestEventWithoutEndpointKept(t *testing.T) {
	t.Parallel()
	b := newBed(t)
	r, err := webhooks.New(b.pool, b.st, webhooks.Options{
		Timeout: 10 * time.Second, MaxAttempts: 3, BackoffBase: 50 * time.Millisecond, BackoffMax: 400 * time.Millisecond,
		PerEndpointConcurrency: 1, PollInterval: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	h := b.hub(t, eventlog.Options{PollInterval: 20 * time.Millisecond}, false)
	start := subscribe(t, h, nil, nil).Position()

	if err := r.Publish(t.Context(), "account.created", &shebav1.Account{Id: "a1", Username: "ann"}); err != nil {
		t.Fatal(err)
	}
	// The fan-out job completes: before, it deleted such an event.
	for i := 0; ; i++ {
		var n int
		if err := b.pool.QueryRow(t.Context(), `SELECT count(*) FROM river_job WHERE kind = 'sheba_webhook_event' AND state = 'completed'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if i == 300 {
			t.Fatal("the event's fan-out did not complete within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	s := subscribe(t, h, nil, &start)
	e := next(t, s, 10*time.Second)
	if e.Type != "account.created" || string(e.Data) != `{"id":"a1","username":"ann"}` {
		t.Errorf("got %s %s, want account.created with the account's JSON", e.Type, e.Data)
	}
}

// TestListenerFollowsFailover: when a query of the pool finds its server
// gone (here: its backend terminated), store.Failover makes the older
// connections stale; the listener's is one, and it listens again on a new
// one. The poll floor is an hour: events after that come through it.
func TestListenerFollowsFailover(t *testing.T) {
	t.Parallel()
	f := store.NewFailover(slog.New(slog.DiscardHandler))
	pool, err := store.OpenPool(t.Context(), storetest.NewDatabase(t), 10, tracenoop.NewTracerProvider(), store.WithFailover(f))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b := &bed{pool: pool, st: store.New(pool)}
	h := b.hub(t, eventlog.Options{PollInterval: time.Hour, Failover: f, MaxBackoff: 200 * time.Millisecond}, false)
	s := subscribe(t, h, nil, nil)
	b.publish(t.Context(), t, "t", 0)
	next(t, s, 10*time.Second)

	// A connection of the pool whose server goes away.
	c, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := c.QueryRow(t.Context(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(t.Context(), `SELECT 1`); err == nil {
		t.Fatal("a query on the terminated connection succeeded")
	}
	c.Release()

	for i := 0; h.Stats().Listens < 2; i++ {
		if i == 200 {
			t.Fatalf("got %d listens 20s after the switch, want 2", h.Stats().Listens)
		}
		time.Sleep(100 * time.Millisecond)
	}
	id := b.publish(t.Context(), t, "t", 1)
	if e := next(t, s, 10*time.Second); e.ID != id {
		t.Errorf("got %s, want %s", e.ID, id)
	}
}
