package e2e

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/callinfo"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/internal/app"
)

// cannedEvents is a test double of EventService: each stream gets at once
// a heartbeat whose cursor names its caller (as the chain found it), then
// every event published while it is open that its filter takes, until the
// client goes. It stands in for the event log's streams, so that the
// transports are tested on their own.
type cannedEvents struct {
	shebav1.UnimplementedEventServiceServer

	mu      sync.Mutex
	streams map[chan *shebav1.Event]bool
	// afters are the after_event_id of every stream opened, in order.
	afters []string
	// opened has a value for each stream that has sent its first message.
	opened chan struct{}
	// endAfter, if not 0, ends each stream with UNAVAILABLE after it has
	// sent that many events, as sheba ends one at events.max_duration.
	endAfter int
}

func newCannedEvents() *cannedEvents {
	return &cannedEvents{streams: map[chan *shebav1.Event]bool{}, opened: make(chan struct{}, 16)}
}

func (c *cannedEvents) StreamEvents(req *shebav1.StreamEventsRequest, stream grpc.ServerStreamingServer[shebav1.StreamEventsResponse]) error {
	ctx := stream.Context()
	caller := "none"
	if info := callinfo.FromContext(ctx); info != nil && info.CallerID != "" {
		caller = info.CallerID
	}
	ch := make(chan *shebav1.Event, 16)
	c.mu.Lock()
	c.streams[ch] = true
	c.afters = append(c.afters, req.GetAfterEventId())
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.streams, ch)
		c.mu.Unlock()
	}()
	if err := stream.Send(&shebav1.StreamEventsResponse{Message: &shebav1.StreamEventsResponse_Heartbeat{
		Heartbeat: &shebav1.Heartbeat{Cursor: "caller=" + caller + ",after=" + req.GetAfterEventId()},
	}}); err != nil {
		return err
	}
	c.opened <- struct{}{}
	sent := 0
	for {
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case ev := <-ch:
			if len(req.GetEventTypes()) > 0 && !slices.Contains(req.GetEventTypes(), ev.GetType()) {
				continue
			}
			if err := stream.Send(&shebav1.StreamEventsResponse{Message: &shebav1.StreamEventsResponse_Event{Event: ev}}); err != nil {
				return err
			}
			if sent++; sent == c.endAfter {
				return status.Error(codes.Unavailable, "the stream's max_duration has passed")
			}
		}
	}
}

// publish hands ev to every open stream.
func (c *cannedEvents) publish(ev *shebav1.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ch := range c.streams {
		ch <- ev
	}
}

// cannedEvent is an event of type typ with id id.
func cannedEvent(t *testing.T, id, typ string) *shebav1.Event {
	t.Helper()
	data, err := structpb.NewStruct(map[string]any{"id": "sub-" + id, "state": "ACTIVE"})
	if err != nil {
		t.Fatal(err)
	}
	return &shebav1.Event{Id: id, Type: typ, CreateTime: timestamppb.Now(), Data: data}
}

// openEvents opens StreamEvents over browser protocol p (connect-json,
// connect-proto or grpc-web) with connect-go's client, with key in
// x-api-key unless it is "", and header's name, value pairs.
func openEvents(ctx context.Context, t *testing.T, e *testEnv, p, key string, req *shebav1.StreamEventsRequest, header ...string) *connect.ServerStreamForClient[shebav1.StreamEventsResponse] {
	t.Helper()
	var opts []connect.ClientOption
	switch p {
	case "connect-json":
		opts = append(opts, connect.WithProtoJSON())
	case "grpc-web":
		opts = append(opts, connect.WithGRPCWeb())
	}
	client := connect.NewClient[shebav1.StreamEventsRequest, shebav1.StreamEventsResponse](http.DefaultClient,
		e.baseURL+shebav1.EventService_StreamEvents_FullMethodName, opts...)
	r := connect.NewRequest(req)
	if key != "" {
		r.Header().Set("X-Api-Key", key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header().Set(header[i], header[i+1])
	}
	s, err := client.CallServerStream(ctx, r)
	if err != nil {
		t.Fatalf("open StreamEvents over %s: %v", p, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestBrowserStreams: StreamEvents over Connect (JSON and proto) and
// gRPC-Web, with connect-go's clients through the HTTP listener: the
// opening passes the chain (the handler sees the caller; no key is
// UNAUTHENTICATED, a bad event type INVALID_ARGUMENT, each with its
// ErrorInfo), the first message arrives while the stream stays open, and
// an event published later reaches the open stream, filtered by type.
func TestBrowserStreams(t *testing.T) {
	t.Parallel()
	events := newCannedEvents()
	e := newTestEnvWith(t, nil, []app.Option{app.WithEventServer(events)})
	for _, p := range []string{"connect-json", "connect-proto", "grpc-web"} {
		t.Run(p, func(t *testing.T) {
			open := func(ctx context.Context, key string, req *shebav1.StreamEventsRequest) *connect.ServerStreamForClient[shebav1.StreamEventsResponse] {
				return openEvents(ctx, t, e, p, key, req, "X-Request-Id", "stream-"+p)
			}
			refused := func(name, key string, req *shebav1.StreamEventsRequest, code codes.Code, why, field string) {
				t.Helper()
				s := open(t.Context(), key, req)
				defer s.Close()
				if s.Receive() {
					t.Fatalf("%s: got message %v, want %v", name, s.Msg(), code)
				}
				var ce *connect.Error
				if !errors.As(s.Err(), &ce) {
					t.Fatalf("%s: got %v, want a connect error", name, s.Err())
				}
				wantStatus(t, statusOfConnect(t, ce), code, why, field)
			}
			refused("without a key", "", &shebav1.StreamEventsRequest{}, codes.Unauthenticated, reason.APIKeyMissing, "")
			refused("a bad event type", testKey, &shebav1.StreamEventsRequest{EventTypes: []string{"no.such.type"}},
				codes.InvalidArgument, reason.InvalidArgument, "event_types[0]")

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			s := open(ctx, testKey, &shebav1.StreamEventsRequest{
				EventTypes: []string{"subscription.created"}, AfterEventId: "evt-0",
			})
			if !s.Receive() {
				t.Fatalf("first message: %v", s.Err())
			}
			if got, want := s.Msg().GetHeartbeat().GetCursor(), "caller=test,after=evt-0"; got != want {
				t.Errorf("first message: got %v, want a heartbeat with cursor %q", s.Msg(), want)
			}
			if got := s.ResponseHeader().Get("X-Request-Id"); got != "stream-"+p {
				t.Errorf("X-Request-Id %q, want the request's", got)
			}
			<-events.opened
			// The stream is open and has sent its first message: what is
			// published now reaches it, filtered.
			events.publish(cannedEvent(t, "evt-1", "account.created"))
			events.publish(cannedEvent(t, "evt-2", "subscription.created"))
			if !s.Receive() {
				t.Fatalf("event: %v", s.Err())
			}
			ev := s.Msg().GetEvent()
			if ev.GetId() != "evt-2" || ev.GetType() != "subscription.created" || ev.GetData().GetFields()["id"].GetStringValue() != "sub-evt-2" {
				t.Errorf("event: got %v, want evt-2 subscription.created with its data", s.Msg())
			}
		})
	}

	// Each stream counted once, under the gRPC method: a refused one with
	// its code, an admitted one when it ends (here canceled by its client,
	// once its subtest returned).
	const m = "method=" + shebav1.EventService_StreamEvents_FullMethodName
	want := map[string]float64{
		m + ",code=Canceled,api_key_id=test":        3,
		m + ",code=Unauthenticated,api_key_id=none": 3,
		m + ",code=InvalidArgument,api_key_id=test": 3,
	}
	var got map[string]float64
	counted := func() bool {
		got = series(e.scrape(t), "sheba_requests_total", "method", "code", "api_key_id")
		for k, v := range want {
			if got[k] != v {
				return false
			}
		}
		return true
	}
	for start := time.Now(); !counted() && time.Since(start) < 10*time.Second; {
		time.Sleep(20 * time.Millisecond)
	}
	if !counted() {
		for k, v := range want {
			if got[k] != v {
				t.Errorf("sheba_requests_total{%s}: got %v, want %v (all: %v)", k, got[k], v, got)
			}
		}
	}
}

// TestBrowserStreamText: a gRPC-Web text stream sends each message as a
// base64 string of its own, padded: the first heartbeat decodes whole
// while the stream stays open, before anything else is sent.
func TestBrowserStreamText(t *testing.T) {
	t.Parallel()
	events := newCannedEvents()
	e := newTestEnvWith(t, nil, []app.Option{app.WithEventServer(events)})
	// A message whose frame's base64 would end mid-group unpadded.
	req := &shebav1.StreamEventsRequest{AfterEventId: "evt-x"}
	msg, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	frame := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	body := base64.StdEncoding.EncodeToString(append(frame, msg...))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, e.baseURL+shebav1.EventService_StreamEvents_FullMethodName, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Content-Type", "application/grpc-web-text")
	hr.Header.Set("X-Grpc-Web", "1")
	hr.Header.Set("X-Api-Key", testKey)
	r, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	if ct := r.Header.Get("Content-Type"); r.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "application/grpc-web-text") {
		t.Fatalf("HTTP %d, Content-Type %q", r.StatusCode, ct)
	}
	// Read until the text holds a whole frame: with the stream open and
	// nothing published, only the first heartbeat can complete it.
	var text []byte
	buf := make([]byte, 512)
	for {
		n, err := r.Body.Read(buf)
		text = append(text, buf[:n]...)
		if len(text)%4 == 0 && len(text) > 0 {
			if bin, derr := base64.StdEncoding.DecodeString(string(text)); derr == nil && len(bin) >= 5 &&
				int(binary.BigEndian.Uint32(bin[1:5])) == len(bin)-5 {
				var got shebav1.StreamEventsResponse
				if err := proto.Unmarshal(bin[5:], &got); err != nil {
					t.Fatal(err)
				}
				if want := "caller=test,after=evt-x"; got.GetHeartbeat().GetCursor() != want {
					t.Errorf("first message %v, want a heartbeat with cursor %q", &got, want)
				}
				return
			}
		}
		if err != nil {
			t.Fatalf("after %q: %v", text, err)
		}
	}
}

// TestBrowserStreamTimeouts: a browser stream outlives http.read_timeout
// and http.write_timeout, which bound reading its request and each write,
// and limits.timeout, which bounds its opening, not the stream: an event
// published after all have passed reaches it, over HTTP/1.1 as a browser
// on plain HTTP speaks it.
func TestBrowserStreamTimeouts(t *testing.T) {
	t.Parallel()
	events := newCannedEvents()
	const timeout = 300 * time.Millisecond
	e := newTestEnvWith(t, nil, []app.Option{app.WithEventServer(events)}, func(c *config.Config) {
		c.HTTP.ReadHeaderTimeout, c.HTTP.ReadTimeout, c.HTTP.WriteTimeout = timeout, timeout, timeout
		c.Limits.Timeout = timeout
	})
	s := openEvents(t.Context(), t, e, "connect-proto", testKey, &shebav1.StreamEventsRequest{})
	if !s.Receive() {
		t.Fatalf("first message: %v", s.Err())
	}
	<-events.opened
	time.Sleep(3 * timeout)
	events.publish(cannedEvent(t, "evt-late", "subscription.created"))
	if !s.Receive() {
		t.Fatalf("after the HTTP timeouts: %v", s.Err())
	}
	if got := s.Msg().GetEvent().GetId(); got != "evt-late" {
		t.Errorf("got %v, want evt-late", s.Msg())
	}
}

// TestBrowserStreamShutdown: at shutdown, once the drain delay has passed,
// an open browser stream ends with UNAVAILABLE (the client resumes
// elsewhere), and sheba stops without cutting anything: the stream does
// not hold the HTTP server's drain to shutdown.timeout.
func TestBrowserStreamShutdown(t *testing.T) {
	t.Parallel()
	events := newCannedEvents()
	e := newTestEnvWith(t, nil, []app.Option{app.WithEventServer(events)})
	for _, p := range []string{"connect-proto", "grpc-web"} {
		s := openEvents(t.Context(), t, e, p, testKey, &shebav1.StreamEventsRequest{})
		if !s.Receive() {
			t.Fatalf("%s: first message: %v", p, s.Err())
		}
		<-events.opened
		defer func() {
			if s.Receive() {
				t.Errorf("%s: got %v after shutdown, want the stream's end", p, s.Msg())
			}
			if got := connect.CodeOf(s.Err()); got != connect.CodeUnavailable {
				t.Errorf("%s: the stream ended with %v, want unavailable", p, s.Err())
			}
		}()
	}
	if err := e.stop(); err != nil {
		t.Errorf("shutdown with open browser streams: %v", err)
	}
}
