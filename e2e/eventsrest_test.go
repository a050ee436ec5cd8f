package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/internal/app"
)

// scriptedEvents is an EventService that streams what its after_event_id
// names, so that the REST tests see framing, headers and errors before the
// real handler streams the event log:
//
//   - "expired": OUT_OF_RANGE EVENT_CURSOR_EXPIRED before any message;
//   - "fail-later": a heartbeat and an event, then UNAVAILABLE;
//   - "ticking": a heartbeat every tick until the client goes away;
//   - anything else: a heartbeat (cursor "c0") and an event ("ev1"), then
//     nothing until the client goes away.
//
// It records each after_event_id it is given, and the streams whose
// context ended (hasEnded).
type scriptedEvents struct {
	shebav1.UnimplementedEventServiceServer
	tick time.Duration

	mu    sync.Mutex
	after []string
	ended map[string]bool
}

var scriptedData, _ = structpb.NewStruct(map[string]any{"id": "a1", "username": "ada"})

func (c *scriptedEvents) StreamEvents(req *shebav1.StreamEventsRequest, s grpc.ServerStreamingServer[shebav1.StreamEventsResponse]) error {
	c.mu.Lock()
	c.after = append(c.after, req.GetAfterEventId())
	c.mu.Unlock()
	// When the handler's context ends, whenever the handler returns: a
	// Send may see the client gone before the context (the chain's
	// stream side ends it just after the call's).
	context.AfterFunc(s.Context(), func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.ended == nil {
			c.ended = map[string]bool{}
		}
		c.ended[req.GetAfterEventId()] = true
	})
	heartbeat := func(cursor string) error {
		return s.Send(&shebav1.StreamEventsResponse{Message: &shebav1.StreamEventsResponse_Heartbeat{Heartbeat: &shebav1.Heartbeat{Cursor: cursor}}})
	}
	switch req.GetAfterEventId() {
	case "expired":
		return reason.Error(codes.OutOfRange, "EVENT_CURSOR_EXPIRED", "the cursor is older than the events kept")
	case "ticking":
		for i := 0; ; i++ {
			if err := heartbeat("t"); err != nil {
				return err
			}
			select {
			case <-time.After(c.tick):
			case <-s.Context().Done():
				return s.Context().Err()
			}
		}
	}
	if err := heartbeat("c0"); err != nil {
		return err
	}
	if err := s.Send(&shebav1.StreamEventsResponse{Message: &shebav1.StreamEventsResponse_Event{Event: &shebav1.Event{
		Id: "ev1", Type: "account.created", Data: scriptedData,
	}}}); err != nil {
		return err
	}
	if req.GetAfterEventId() == "fail-later" {
		return reason.Error(codes.Unavailable, reason.ForCode(codes.Unavailable), "the stream ends")
	}
	<-s.Context().Done()
	return s.Context().Err()
}

// hasEnded reports whether the context of the stream opened after after
// has ended.
func (c *scriptedEvents) hasEnded(after string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ended[after]
}

func (c *scriptedEvents) lastAfter() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.after) == 0 {
		return ""
	}
	return c.after[len(c.after)-1]
}

// openStream sends GET path with testKey and header (name, value pairs)
// and returns the response, its body still streaming. The client asks for
// gzip itself, so that it sees the encoding as sent.
func openStream(t *testing.T, ctx context.Context, e *testEnv, path string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.baseURL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", testKey)
	req.Header.Set("Accept-Encoding", "gzip, zstd")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	t.Cleanup(client.CloseIdleConnections)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// wantStreamHeaders checks what every REST stream's answer carries.
func wantStreamHeaders(t *testing.T, resp *http.Response, contentType string) {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("got HTTP %d, want 200", resp.StatusCode)
	}
	for name, want := range map[string]string{
		"Content-Type": contentType, "Cache-Control": "no-store", "Content-Encoding": "",
	} {
		if got := resp.Header.Get(name); got != want {
			t.Errorf("%s: got %q, want %q", name, got, want)
		}
	}
}

// sseEvent is one Server-Sent Event as a reader of the format sees it.
type sseEvent struct {
	ID, Event, Data string
}

// sseReader reads Server-Sent Events by the format's rules (fields up to
// a blank line, data lines joined by "\n", comments ignored).
type sseReader struct {
	s *bufio.Scanner
}

func (r sseReader) next() (sseEvent, error) {
	var ev sseEvent
	var data []string
	seen := false
	for r.s.Scan() {
		line := r.s.Text()
		if line == "" {
			if !seen {
				continue
			}
			ev.Data = strings.Join(data, "\n")
			return ev, nil
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		seen = true
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "id":
			ev.ID = value
		case "event":
			ev.Event = value
		case "data":
			data = append(data, value)
		}
	}
	if err := r.s.Err(); err != nil {
		return ev, err
	}
	return ev, io.EOF
}

// TestStreamEventsREST: GET /v1/events:stream over real HTTP, as
// newline-delimited JSON (grpc-gateway's stream format) and as
// Server-Sent Events, with a test double of the handler.
func TestStreamEventsREST(t *testing.T) {
	t.Parallel()
	events := &scriptedEvents{tick: 100 * time.Millisecond}
	e := newTestEnvWith(t, nil, []app.Option{app.WithEventServer(events)}, func(c *config.Config) {
		c.HTTP.WriteTimeout = time.Second
		// Every answer large enough to be compressed: a stream never is.
		c.Compression.MinBytes = 0
	})
	wantEvent := `{"id":"ev1","type":"account.created","data":{"id":"a1","username":"ada"}}`

	t.Run("NDJSON", func(t *testing.T) {
		resp := openStream(t, t.Context(), e, "/v1/events:stream?eventTypes=account.created")
		wantStreamHeaders(t, resp, "application/json")
		lines := bufio.NewScanner(resp.Body)
		for i, want := range []string{`{"result":{"heartbeat":{"cursor":"c0"}}}`, `{"result":{"event":` + wantEvent + `}}`} {
			if !lines.Scan() {
				t.Fatalf("line %d: %v", i, lines.Err())
			}
			wantJSON(t, lines.Bytes(), want)
		}
	})

	t.Run("NDJSON error after the first line", func(t *testing.T) {
		resp := openStream(t, t.Context(), e, "/v1/events:stream?afterEventId=fail-later")
		wantStreamHeaders(t, resp, "application/json")
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
		if len(lines) != 3 {
			t.Fatalf("got %d lines %q, want a heartbeat, an event and an error", len(lines), body)
		}
		var last struct{ Error json.RawMessage }
		if err := json.Unmarshal([]byte(lines[2]), &last); err != nil || last.Error == nil {
			t.Fatalf("last line %q: want {\"error\":<Status>} (%v)", lines[2], err)
		}
		wantStatusJSON(t, last.Error, codes.Unavailable, reason.ForCode(codes.Unavailable))
	})

	t.Run("SSE", func(t *testing.T) {
		resp := openStream(t, t.Context(), e, "/v1/events:stream?afterEventId=from-query",
			"Accept", "text/event-stream", "Last-Event-ID", "from-header")
		wantStreamHeaders(t, resp, "text/event-stream")
		r := sseReader{bufio.NewScanner(resp.Body)}
		var got []sseEvent
		for range 2 {
			ev, err := r.next()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ev)
		}
		var data map[string]any
		if err := json.Unmarshal([]byte(got[1].Data), &data); err != nil {
			t.Fatalf("event data %q: %v", got[1].Data, err)
		}
		got[1].Data = ""
		want := []sseEvent{{ID: "c0", Event: "heartbeat", Data: `{"cursor":"c0"}`}, {ID: "ev1", Event: "account.created"}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(map[string]any{"id": "a1", "username": "ada"}, data); diff != "" {
			t.Errorf("event data (-want +got):\n%s", diff)
		}
		// Last-Event-ID wins over afterEventId.
		if got := events.lastAfter(); got != "from-header" {
			t.Errorf("the handler got after_event_id %q, want Last-Event-ID's", got)
		}
	})

	t.Run("SSE error after the first event", func(t *testing.T) {
		resp := openStream(t, t.Context(), e, "/v1/events:stream", "Accept", "text/event-stream", "Last-Event-ID", "fail-later")
		wantStreamHeaders(t, resp, "text/event-stream")
		r := sseReader{bufio.NewScanner(resp.Body)}
		var last sseEvent
		n := 0
		for {
			ev, err := r.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			last, n = ev, n+1
		}
		if n != 3 || last.Event != "error" {
			t.Fatalf("got %d events, the last %+v; want 3, the last an error", n, last)
		}
		wantStatusJSON(t, []byte(last.Data), codes.Unavailable, reason.ForCode(codes.Unavailable))
	})

	t.Run("errors before the first line", func(t *testing.T) {
		for _, accept := range []string{"application/json", "text/event-stream"} {
			r := e.do(t, http.MethodGet, "/v1/events:stream?afterEventId=expired", "", "Accept", accept, "X-Request-Id", "expired-"+accept)
			wantRESTDetails(t, "an expired cursor, "+accept, r, http.StatusBadRequest, "EVENT_CURSOR_EXPIRED")
			if got := r.Header.Get("X-Request-Id"); got != "expired-"+accept {
				t.Errorf("%s: X-Request-Id %q, want the request's", accept, got)
			}
			if got := r.Header.Get("Cache-Control"); got != "no-store" {
				t.Errorf("%s: Cache-Control %q, want no-store", accept, got)
			}
		}
		r := e.do(t, http.MethodGet, "/v1/events:stream", "", "X-Api-Key", "", "Accept", "text/event-stream")
		wantRESTDetails(t, "without a key", r, http.StatusUnauthorized, reason.APIKeyMissing)
		r = e.do(t, http.MethodGet, "/v1/events:stream?eventTypes=account.deleted", "", "Accept", "text/event-stream")
		wantRESTError(t, r, http.StatusBadRequest, codes.InvalidArgument, "event_types[0]")
		r = e.do(t, http.MethodGet, "/v1/events:stream", "", "Accept", "application/cbor")
		wantRESTDetails(t, "Accept: application/cbor", r, http.StatusNotAcceptable, reason.NotAcceptable)
		// The key first, whatever is asked for.
		r = e.do(t, http.MethodGet, "/v1/events:stream", "", "Accept", "application/cbor", "X-Api-Key", "")
		wantRESTDetails(t, "Accept: application/cbor without a key", r, http.StatusUnauthorized, reason.APIKeyMissing)
	})

	t.Run("a client that goes away ends the handler's stream", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		resp := openStream(t, ctx, e, "/v1/events:stream", "Last-Event-ID", "goes-away", "Accept", "text/event-stream")
		if _, err := (sseReader{bufio.NewScanner(resp.Body)}).next(); err != nil {
			t.Fatal(err)
		}
		cancel()
		waitEnded(t, events, "goes-away")
	})

	t.Run("write timeout bounds each write, not the stream", func(t *testing.T) {
		// 30 heartbeats 100ms apart: three times http.write_timeout.
		resp := openStream(t, t.Context(), e, "/v1/events:stream?afterEventId=ticking")
		wantStreamHeaders(t, resp, "application/json")
		lines := bufio.NewScanner(resp.Body)
		for i := range 30 {
			if !lines.Scan() {
				t.Fatalf("the stream ended after %d heartbeats: %v", i, lines.Err())
			}
		}
		resp.Body.Close()
		waitEnded(t, events, "ticking")
	})
}

// waitEnded waits for the handler of the stream opened after after to see
// its context canceled.
func waitEnded(t *testing.T, events *scriptedEvents, after string) {
	t.Helper()
	waitFor(t, 10*time.Second, "the handler of stream "+after+" to see its client gone", func() bool { return events.hasEnded(after) })
}

// wantJSON checks that got is the JSON document want.
func wantJSON(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%q: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(w, g); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// wantStatusJSON checks a google.rpc.Status in JSON: its code and
// ErrorInfo reason.
func wantStatusJSON(t *testing.T, data []byte, code codes.Code, want string) {
	t.Helper()
	var st struct {
		Code    codes.Code
		Details []struct {
			Type   string `json:"@type"`
			Reason string
		}
	}
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatalf("status %q: %v", data, err)
	}
	if st.Code != code {
		t.Errorf("status %s: code %v, want %v", data, st.Code, code)
	}
	var reasons []string
	for _, d := range st.Details {
		if strings.HasSuffix(d.Type, "google.rpc.ErrorInfo") {
			reasons = append(reasons, d.Reason)
		}
	}
	if diff := cmp.Diff([]string{want}, reasons); diff != "" {
		t.Errorf("status %s: ErrorInfo reasons (-want +got):\n%s", data, diff)
	}
}

// TestStreamEventsRESTLive: sheba's own handler over REST. An SSE stream
// and a newline-delimited JSON stream both get the account.created of an
// account made while they are open: the event written once in each REST
// encoding and shared by every stream (server/event.go), the SSE's data
// the resource's JSON and the JSON line the StreamEventsResponse's; a
// stream of the same key beyond events.max_streams_per_key is an ordinary
// 429 TOO_MANY_STREAMS (the chain's stream side judges REST openings too).
func TestStreamEventsRESTLive(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, func(c *config.Config) { c.Events.MaxStreamsPerKey = 2 })
	resp := openStream(t, t.Context(), e, "/v1/events:stream?eventTypes=account.created", "Accept", "text/event-stream")
	wantStreamHeaders(t, resp, "text/event-stream")
	r := sseReader{bufio.NewScanner(resp.Body)}
	first, err := r.next()
	if err != nil {
		t.Fatal(err)
	}
	if first.Event != "heartbeat" || first.ID == "" {
		t.Errorf("first event %+v, want a heartbeat with its cursor as id", first)
	}
	ndjson := openStream(t, t.Context(), e, "/v1/events:stream?eventTypes=account.created")
	wantStreamHeaders(t, ndjson, "application/json")
	lines := bufio.NewScanner(ndjson.Body)
	if !lines.Scan() {
		t.Fatalf("no first line: %v", lines.Err())
	}

	refused := e.do(t, http.MethodGet, "/v1/events:stream", "")
	wantRESTDetails(t, "a third stream of the key", refused, http.StatusTooManyRequests, reason.TooManyStreams)

	created := e.do(t, http.MethodPost, "/v1/accounts", `{"username":"restlive","password":"password1"}`)
	wantCode(t, created, http.StatusOK)
	var account map[string]any
	if err := json.Unmarshal(created.Body, &account); err != nil {
		t.Fatal(err)
	}

	var sse sseEvent
	for range 100 { // heartbeats may come first
		if sse, err = r.next(); err != nil {
			t.Fatal(err)
		}
		if sse.Event != "heartbeat" {
			break
		}
	}
	var data map[string]any
	if err := json.Unmarshal([]byte(sse.Data), &data); err != nil {
		t.Fatalf("event data %q: %v", sse.Data, err)
	}
	if sse.Event != "account.created" || sse.ID == "" {
		t.Errorf("got %+v, want the account.created of restlive with its id", sse)
	}
	if diff := cmp.Diff(account, data); diff != "" {
		t.Errorf("SSE data (-the account +got):\n%s", diff)
	}

	var line struct {
		Result struct {
			Event *struct {
				ID         string         `json:"id"`
				Type       string         `json:"type"`
				CreateTime string         `json:"createTime"`
				Data       map[string]any `json:"data"`
			} `json:"event"`
		} `json:"result"`
	}
	for range 100 {
		if !lines.Scan() {
			t.Fatalf("the JSON stream ended: %v", lines.Err())
		}
		line.Result.Event = nil
		if err := json.Unmarshal(lines.Bytes(), &line); err != nil {
			t.Fatalf("line %q: %v", lines.Bytes(), err)
		}
		if line.Result.Event != nil {
			break
		}
	}
	ev := line.Result.Event
	if ev == nil || ev.ID != sse.ID || ev.Type != "account.created" || ev.CreateTime == "" {
		t.Fatalf("JSON line %s: want the event the SSE stream got (id %q) with its createTime", lines.Bytes(), sse.ID)
	}
	if diff := cmp.Diff(account, ev.Data); diff != "" {
		t.Errorf("JSON line's data (-the account +got):\n%s", diff)
	}
}

// TestStreamEventsRESTShutdown: an open REST stream ends at shutdown with
// a last {"error":…} line of UNAVAILABLE, and does not hold the shutdown
// (Serve returns nil within shutdown.timeout).
func TestStreamEventsRESTShutdown(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, func(c *config.Config) {
		c.Shutdown.DrainDelay = 100 * time.Millisecond
		c.Shutdown.Timeout = 5 * time.Second
	})
	resp := openStream(t, t.Context(), e, "/v1/events:stream")
	wantStreamHeaders(t, resp, "application/json")
	lines := bufio.NewScanner(resp.Body)
	if !lines.Scan() {
		t.Fatal(lines.Err())
	}
	if err := e.stop(); err != nil {
		t.Errorf("Serve with a REST stream open: %v", err)
	}
	var last []byte
	for lines.Scan() {
		last = append(last[:0], lines.Bytes()...)
	}
	var end struct{ Error json.RawMessage }
	if err := json.Unmarshal(last, &end); err != nil || end.Error == nil {
		t.Fatalf("last line %q: want {\"error\":<Status>} (%v)", last, err)
	}
	var st struct{ Code codes.Code }
	if err := json.Unmarshal(end.Error, &st); err != nil || st.Code != codes.Unavailable {
		t.Errorf("last line %s: want code UNAVAILABLE", last)
	}
}
