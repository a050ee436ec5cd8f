package e2e

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/webhooks/eventlog"
)

// keyed returns ctx sending key as x-api-key (the harness' conn adds its
// key to unary calls only).
func keyed(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
}

// openEvents opens StreamEvents with testKey on e's connection, under ctx.
func (e *testEnv) openEvents(ctx context.Context, t *testing.T, req *shebav1.StreamEventsRequest, opts ...grpc.CallOption) shebav1.EventService_StreamEventsClient {
	t.Helper()
	s, err := shebav1.NewEventServiceClient(e.anon).StreamEvents(keyed(ctx, testKey), req, opts...)
	if err != nil {
		t.Fatalf("StreamEvents: %v", err)
	}
	return s
}

// putEvent writes an event of type typ whose data is data (JSON) into the
// log, as a change's transaction does, and returns its id.
func (e *testEnv) putEvent(t testing.TB, typ, data string) string {
	t.Helper()
	id := uuid.NewString()
	body := fmt.Sprintf(`{"id":%q,"type":%q,"data":%s}`, id, typ, data)
	if err := store.New(e.pool).CreateWebhookEvent(context.Background(), store.WebhookEvent{
		ID: id, Type: typ, Body: []byte(body), CreateTime: time.Now(),
	}); err != nil {
		t.Fatalf("put event: %v", err)
	}
	return id
}

// nextEvent returns the stream's next event, skipping heartbeats; last is
// the position of the last message received (an id or a cursor).
func nextEvent(s shebav1.EventService_StreamEventsClient, last *string) (*shebav1.Event, error) {
	for {
		m, err := s.Recv()
		if err != nil {
			return nil, err
		}
		if hb := m.GetHeartbeat(); hb != nil {
			if last != nil {
				*last = hb.GetCursor()
			}
			continue
		}
		if last != nil {
			*last = m.GetEvent().GetId()
		}
		return m.GetEvent(), nil
	}
}

// TestStreamEventsGRPC: the first message is a heartbeat with a cursor, at
// once; an event written reaches the stream within a second, with its id,
// type, time and data (the resource's JSON as a Struct); a stream filtered
// to one type gets only that type.
func TestStreamEventsGRPC(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	all := e.openEvents(ctx, t, &shebav1.StreamEventsRequest{})
	first, err := all.Recv()
	if err != nil {
		t.Fatalf("first message: %v", err)
	}
	if c := first.GetHeartbeat().GetCursor(); c == "" {
		t.Fatalf("first message: got %v, want a heartbeat with a cursor", first)
	}
	subs := e.openEvents(ctx, t, &shebav1.StreamEventsRequest{EventTypes: []string{"subscription.created"}})
	if _, err := subs.Recv(); err != nil {
		t.Fatalf("first message of the filtered stream: %v", err)
	}

	acc := e.putEvent(t, "account.created", `{"id":"a1","username":"ann"}`)
	written := time.Now()
	sub := e.putEvent(t, "subscription.created", `{"id":"s1","plan":"pro"}`)

	ev, err := nextEvent(all, nil)
	if err != nil {
		t.Fatal(err)
	}
	// How soon is make bench's to judge (events-fanout, p99 ≤ 1 s): on a
	// loaded machine, or behind another test's open transaction on the
	// shared cluster (docs/events.md), it is later, and that is no fault.
	t.Logf("event received %v after its commit", time.Since(written))
	if ev.GetId() != acc || ev.GetType() != "account.created" || ev.GetCreateTime() == nil {
		t.Errorf("event: got %v, want id %s, account.created, a create_time", ev, acc)
	}
	if got := ev.GetData().GetFields()["username"].GetStringValue(); got != "ann" {
		t.Errorf("event data username: got %q, want ann (data %v)", got, ev.GetData())
	}
	if ev, err = nextEvent(all, nil); err != nil || ev.GetId() != sub {
		t.Errorf("second event: got %v, %v, want %s", ev, err, sub)
	}
	if ev, err = nextEvent(subs, nil); err != nil || ev.GetId() != sub || ev.GetType() != "subscription.created" {
		t.Errorf("filtered stream: got %v, %v, want subscription.created %s alone", ev, err, sub)
	}
}

// TestStreamEventsResume: writers write concurrently while a client reads
// a few events at a time, then resumes after the last id or cursor it
// received, again and again; what it received, once each, in order, is
// what a reader that never stopped received.
func TestStreamEventsResume(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, func(c *config.Config) {
		c.Events.Heartbeat = time.Second
		// A stream the reader left frees its slot once the server has
		// seen it go, which on a busy machine can be after the next
		// rounds have opened theirs: room for those, beyond the default
		// 10 of a key (the limit has tests of its own).
		c.Events.MaxStreamsPerKey = 200
	})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	whole := e.openEvents(ctx, t, &shebav1.StreamEventsRequest{})
	var start string
	if m, err := whole.Recv(); err != nil {
		t.Fatal(err)
	} else {
		start = m.GetHeartbeat().GetCursor()
	}

	const writers, each = 4, 25
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				e.putEvent(t, "account.created", fmt.Sprintf(`{"writer":%d,"i":%d}`, w, i))
			}
		})
	}
	total := writers * each

	var want []string
	for len(want) < total {
		ev, err := nextEvent(whole, nil)
		if err != nil {
			t.Fatalf("reader that never stops, after %d events: %v", len(want), err)
		}
		want = append(want, ev.GetId())
	}

	var got []string
	last := start
	unavailable := 0
	for round := 0; len(got) < total && round < 1000; round++ {
		sctx, stop := context.WithCancel(ctx)
		s := e.openEvents(sctx, t, &shebav1.StreamEventsRequest{AfterEventId: last})
		// A few events, or a heartbeat (whose cursor it resumes from on
		// even rounds), then it goes.
		for n := 0; n < 1+round%7 && len(got) < total; n++ {
			m, err := s.Recv()
			if status.Code(err) == codes.Unavailable && unavailable < 10 {
				// What a client does with UNAVAILABLE: resume from its
				// last position (on a loaded machine a connection to
				// Postgres can take past its 2 s connect timeout).
				unavailable++
				t.Logf("round %d: %v; resuming", round, err)
				break
			}
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if hb := m.GetHeartbeat(); hb != nil {
				last = hb.GetCursor()
				if round%2 == 0 {
					break
				}
				continue
			}
			last = m.GetEvent().GetId()
			got = append(got, last)
		}
		stop()
	}
	wg.Wait()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("resumed reader: got %d events, want %d, the same in the same order\ngot  %v\nwant %v", len(got), len(want), got, want)
	}
}

// TestStreamEventsErrors: an after_event_id never issued or an expired one
// is OUT_OF_RANGE EVENT_CURSOR_EXPIRED; no key UNAUTHENTICATED; an unknown
// type INVALID_ARGUMENT.
func TestStreamEventsErrors(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	old := eventlog.Cursor(eventlog.Position{Xid: 1, Seq: 1}, time.Now().AddDate(-10, 0, 0))
	for _, c := range []struct {
		name   string
		key    string
		req    *shebav1.StreamEventsRequest
		code   codes.Code
		reason string
	}{
		{"unknown event id", testKey, &shebav1.StreamEventsRequest{AfterEventId: uuid.NewString()}, codes.OutOfRange, reason.EventCursorExpired},
		{"garbage", testKey, &shebav1.StreamEventsRequest{AfterEventId: "not-a-cursor"}, codes.OutOfRange, reason.EventCursorExpired},
		{"expired cursor", testKey, &shebav1.StreamEventsRequest{AfterEventId: old}, codes.OutOfRange, reason.EventCursorExpired},
		{"no key", "", &shebav1.StreamEventsRequest{}, codes.Unauthenticated, reason.APIKeyMissing},
		{"unknown type", testKey, &shebav1.StreamEventsRequest{EventTypes: []string{"account.deleted"}}, codes.InvalidArgument, reason.InvalidArgument},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			if c.key != "" {
				ctx = keyed(ctx, c.key)
			}
			var header metadata.MD
			s, err := shebav1.NewEventServiceClient(e.anon).StreamEvents(ctx, c.req, grpc.Header(&header))
			if err == nil {
				_, err = s.Recv()
			}
			wantGRPCDetails(t, c.name, err, header, c.code, c.reason)
		})
	}
}

// TestStreamEventsLimits: past events.max_streams_per_key, or
// events.max_streams over keys, a stream is RESOURCE_EXHAUSTED
// TOO_MANY_STREAMS with RetryInfo; a stream that closes frees its slot;
// open streams take no limits.max_inflight slot.
func TestStreamEventsLimits(t *testing.T) {
	t.Parallel()
	const otherKey = "other-key-0123456789abcdefghijklmn"
	e := newTestEnv(t, func(c *config.Config) {
		c.Events.MaxStreamsPerKey = 2
		c.Events.MaxStreams = 3
		c.Limits.MaxInflight = 1
		c.Auth.Keys = append(c.Auth.Keys, keyEntry("other", otherKey))
	})
	open := func(ctx context.Context, key string) error {
		var header metadata.MD
		s, err := shebav1.NewEventServiceClient(e.anon).StreamEvents(keyed(ctx, key), &shebav1.StreamEventsRequest{}, grpc.Header(&header))
		if err == nil {
			_, err = s.Recv()
		}
		if status.Code(err) == codes.ResourceExhausted {
			wantGRPCDetails(t, "stream over the limit", err, header, codes.ResourceExhausted, reason.TooManyStreams)
		}
		return err
	}
	ctx1, close1 := context.WithCancel(t.Context())
	defer close1()
	for i := range 2 {
		if err := open(ctx1, testKey); err != nil {
			t.Fatalf("stream %d of the key: %v", i, err)
		}
	}
	if err := open(t.Context(), testKey); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third stream of the key: got %v, want TOO_MANY_STREAMS", err)
	}
	ctx2, close2 := context.WithCancel(t.Context())
	defer close2()
	if err := open(ctx2, otherKey); err != nil {
		t.Fatalf("a stream of another key: %v", err)
	}
	if err := open(t.Context(), otherKey); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a fourth stream (max_streams 3): got %v, want TOO_MANY_STREAMS", err)
	}
	// Three streams open, max_inflight 1: a unary call still runs.
	if _, err := e.ping.Ping(t.Context(), &shebav1.PingRequest{}); err != nil {
		t.Errorf("Ping with streams open over limits.max_inflight: %v", err)
	}
	close1()
	var err error
	for range 100 { // the server sees the cancel shortly
		if err = open(ctx2, testKey); status.Code(err) != codes.ResourceExhausted {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("after two streams closed: got %v, want a stream", err)
	}
}

// TestStreamEventsSlowReader: a client that does not read is cut with
// RESOURCE_EXHAUSTED STREAM_TOO_SLOW once its buffer is full, while one
// that reads gets every event.
func TestStreamEventsSlowReader(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, func(c *config.Config) { c.Events.Buffer = 8 })
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	// Its own connection, with HTTP/2 windows that do not grow (no BDP
	// estimation), so its flow control stops the server's writes to it
	// after a few events.
	conn, err := grpc.NewClient(e.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	slow, err := shebav1.NewEventServiceClient(conn).StreamEvents(keyed(ctx, testKey), &shebav1.StreamEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := slow.Recv(); err != nil {
		t.Fatal(err)
	}
	fast := e.openEvents(ctx, t, &shebav1.StreamEventsRequest{})
	if _, err := fast.Recv(); err != nil {
		t.Fatal(err)
	}
	// 64 KiB events, each written once the reader that reads has the one
	// before: a few fill the slow one's windows, then its buffer.
	data := fmt.Sprintf(`{"pad":%q}`, strings.Repeat("x", 64<<10))
	const n = 40
	for i := range n {
		id := e.putEvent(t, "account.created", data)
		ev, err := nextEvent(fast, nil)
		if err != nil || ev.GetId() != id {
			t.Fatalf("the reader that reads, event %d: got %v, %v; want %s", i, ev.GetId(), err, id)
		}
	}
	for {
		if _, err = slow.Recv(); err != nil {
			break
		}
	}
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || reason.Of(st) != reason.StreamTooSlow {
		t.Errorf("the reader that did not read: got %v, want RESOURCE_EXHAUSTED STREAM_TOO_SLOW", err)
	}
}

// TestStreamEventsEnds: events.max_duration ends a stream with UNAVAILABLE
// STREAM_ENDED; at shutdown an open stream ends with UNAVAILABLE and the
// shutdown stays within shutdown.timeout; the stream metrics count both.
func TestStreamEventsEnds(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, func(c *config.Config) {
		// Long enough for the second stream to get its event first even
		// on a loaded machine (an event has come 4 s late under a full
		// make test with other work running): the counts below take one
		// stream ended by max_duration.
		c.Events.MaxDuration = 10 * time.Second
		c.Shutdown.DrainDelay = 100 * time.Millisecond
		c.Shutdown.Timeout = 5 * time.Second
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s := e.openEvents(ctx, t, &shebav1.StreamEventsRequest{})
	var err error
	received := -1 // the loop counts the error too
	for err == nil {
		_, err = s.Recv()
		received++
	}
	if st := status.Convert(err); st.Code() != codes.Unavailable || reason.Of(st) != reason.StreamEnded {
		t.Errorf("after max_duration: got %v, want UNAVAILABLE STREAM_ENDED", err)
	}

	counted := e.openEvents(ctx, t, &shebav1.StreamEventsRequest{})
	if _, err := counted.Recv(); err != nil {
		t.Fatal(err)
	}
	e.putEvent(t, "account.created", `{}`)
	received++ // its first message
	for {
		msg, err := counted.Recv()
		if err != nil {
			t.Fatal(err)
		}
		received++
		if msg.GetEvent() != nil {
			break
		}
	}
	m := e.scrape(t)
	if got := series(m, "sheba_streams_open")[""]; got != 1 {
		t.Errorf("sheba_streams_open: got %v, want 1", got)
	}
	if got := series(m, "sheba_stream_events_total")[""]; got != 1 {
		t.Errorf("sheba_stream_events_total: got %v, want 1", got)
	}
	if got := series(m, "sheba_streams_ended_total", "reason")["reason=max_duration"]; got != 1 {
		t.Errorf("sheba_streams_ended_total{reason=max_duration}: got %v, want 1", got)
	}
	if got := series(m, "grpc_server_handled_total", "grpc_type", "grpc_method", "grpc_code")["grpc_type=server_stream,grpc_method=StreamEvents,grpc_code=Unavailable"]; got != 1 {
		t.Errorf(`grpc_server_handled_total{grpc_type="server_stream",grpc_method="StreamEvents",grpc_code="Unavailable"}: got %v, want 1`, got)
	}
	// Each message a stream sent, as go-grpc-middleware counts them.
	if got := series(m, "grpc_server_msg_sent_total", "grpc_type", "grpc_method")["grpc_type=server_stream,grpc_method=StreamEvents"]; got != float64(received) {
		t.Errorf(`grpc_server_msg_sent_total{grpc_type="server_stream",grpc_method="StreamEvents"}: got %v, want the %d messages received`, got, received)
	}
	if got := series(m, "sheba_requests_total", "method", "code")["method="+shebav1.EventService_StreamEvents_FullMethodName+",code=Unavailable"]; got != 1 {
		t.Errorf("sheba_requests_total of StreamEvents, Unavailable: got %v, want 1", got)
	}

	open := e.openEvents(ctx, t, &shebav1.StreamEventsRequest{})
	if _, err := open.Recv(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := e.stop(); err != nil {
		t.Errorf("Serve with an event stream open: %v", err)
	}
	t.Logf("shut down in %v with streams open", time.Since(start))
	for err = nil; err == nil; {
		_, err = open.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Errorf("stream at shutdown: got %v, want UNAVAILABLE", err)
	}
}

// TestStreamEventsMemory opens 500 idle streams over a few connections
// and reports the memory each takes (server and client together, as they
// share this process): the goal is at most 64 KiB. Not parallel: other
// tests' memory would blur the measure.
func TestStreamEventsMemory(t *testing.T) {
	const streams, conns = 500, 4
	e := newTestEnv(t, func(c *config.Config) {
		c.Events.MaxStreams, c.Events.MaxStreamsPerKey = streams, streams
		c.GRPC.MaxConcurrentStreams = streams
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	clients := make([]shebav1.EventServiceClient, conns)
	for i := range clients {
		conn, err := grpc.NewClient(e.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		clients[i] = shebav1.NewEventServiceClient(conn)
		// Connected before the measure.
		s, err := clients[i].StreamEvents(keyed(ctx, testKey), &shebav1.StreamEventsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	measure := func() (heap, stacks int64) {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapInuse), int64(m.StackInuse)
	}
	// Heap and stacks, not RSS: in one process with the client and the
	// other tests' memory, RSS grows by pages the heap reuses.
	heap0, stack0 := measure()
	open := make([]shebav1.EventService_StreamEventsClient, 0, streams)
	for i := range streams - conns {
		s, err := clients[i%conns].StreamEvents(keyed(ctx, testKey), &shebav1.StreamEventsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		open = append(open, s)
	}
	heap1, stack1 := measure()
	n := int64(len(open))
	per := (heap1 - heap0 + stack1 - stack0) / n
	t.Logf("%d idle streams: heap %d B, stacks %d B a stream, %d KiB in all a stream (server and client)",
		n, (heap1-heap0)/n, (stack1-stack0)/n, per>>10)
	if per > 64<<10 {
		t.Errorf("memory per idle stream: %d KiB, want at most 64 KiB", per>>10)
	}
}

// TestStreamEventsClientCancel: a stream its client cancels is counted
// once, with CANCELLED (not UNKNOWN) in sheba_requests_total and the end
// reason client.
func TestStreamEventsClientCancel(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	s := e.openEvents(ctx, t, &shebav1.StreamEventsRequest{})
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	var requests, ended map[string]float64
	waitFor(t, 10*time.Second, "the canceled stream counted", func() bool {
		m := e.scrape(t)
		requests = series(m, "sheba_requests_total", "method", "code")
		ended = series(m, "sheba_streams_ended_total", "reason")
		// The stream's end and its call are counted by two links, one
		// after the other: wait for both.
		return ended["reason=client"] == 1 && requests["method="+shebav1.EventService_StreamEvents_FullMethodName+",code=Canceled"] > 0
	})
	if got := requests["method="+shebav1.EventService_StreamEvents_FullMethodName+",code=Canceled"]; got != 1 {
		t.Errorf("sheba_requests_total of StreamEvents, Canceled: got %v, want 1 (all: %v)", got, requests)
	}
}
