package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/api/httpbody"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/shebasvc/sheba/codec/cborpb"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// eventStreamType is the media type of Server-Sent Events.
const eventStreamType = "text/event-stream"

// isStream reports whether the route of the REST call rc is a
// server-streaming method's.
func isStream(rc *restCall) bool {
	return rc.route != nil && rc.route.stream
}

// serveStream answers a request to a server-streaming route: grpc-gateway's
// newline-delimited JSON, or Server-Sent Events (sseMarshaler) when Accept
// names text/event-stream. Its headers are the same for both: never
// compressed (it goes around the codec: a compressor would hold back what
// the stream flushes), Cache-Control: no-store, CBOR refused (406: a CBOR
// sequence is no format of grpc-gateway's). It reads no body (a GET's has
// no meaning) and holds no body slot: a stream lasts minutes. Each write
// has writeTimeout to be written, not the whole stream (streamWriter).
//
// A request without a valid key is the chain's to refuse (401), whatever it
// asks for, as every non-public method's.
func serveStream(gw *runtime.ServeMux, mux http.Handler, authn Authenticator, rc *restCall, w http.ResponseWriter, r *http.Request, writeTimeout time.Duration) {
	w.Header().Set("Cache-Control", "no-store")
	if acceptsEventStream(r.Header) {
		r.Header.Set("Accept", eventStreamType)
		// Last-Event-ID is what a client of Server-Sent Events resends
		// to resume: it wins over the query's afterEventId.
		if id := r.Header.Get("Last-Event-ID"); id != "" {
			q := r.URL.Query()
			q.Del("after_event_id")
			q.Set("afterEventId", id)
			u := *r.URL
			u.RawQuery = q.Encode()
			r.URL = &u
		}
	} else {
		negotiateAccept(r.Header)
		if r.Header.Get("Accept") == cborpb.MediaType {
			// The refusals, 406 or 401, are JSON.
			r.Header.Set("Accept", "application/json")
			if checkKey(authn, rc) {
				writeError(gw, w, r, &runtime.HTTPStatusError{
					HTTPStatus: http.StatusNotAcceptable,
					Err: reason.Error(codes.InvalidArgument, reason.NotAcceptable,
						"a stream is answered as application/json (newline-delimited) or text/event-stream, not application/cbor"),
				})
				return
			}
		}
	}
	r.Body, r.ContentLength = http.NoBody, 0
	r.Header.Del("Content-Type")
	mux.ServeHTTP(&streamWriter{ResponseWriter: w, timeout: writeTimeout}, r)
}

// acceptsEventStream reports whether Accept names text/event-stream with a
// q-value above 0 (a wildcard does not: NDJSON is the stream's default).
func acceptsEventStream(h http.Header) bool {
	for _, v := range h.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, params, err := mime.ParseMediaType(part)
			if err != nil || mt != eventStreamType {
				continue
			}
			if s, ok := params["q"]; ok {
				if q, err := strconv.ParseFloat(s, 64); err != nil || q <= 0 {
					continue
				}
			}
			return true
		}
	}
	return false
}

// streamWriter writes a stream's answer (REST and the browser protocols):
// each write, and its flush, has timeout to be written (0: net/http's
// deadline alone), and the deadline is lifted once flushed, so that
// http.write_timeout bounds a write that a client does not read, not the
// stream. (Lifted, because an HTTP/2 stream is reset when its deadline
// passes, write or no write.)
type streamWriter struct {
	http.ResponseWriter
	timeout time.Duration
}

func (w *streamWriter) extend() {
	if w.timeout > 0 {
		_ = ExtendWriteDeadline(w.ResponseWriter, w.timeout)
	}
}

func (w *streamWriter) Write(b []byte) (int, error) {
	w.extend()
	return w.ResponseWriter.Write(b)
}

func (w *streamWriter) WriteHeader(code int) {
	w.extend()
	w.ResponseWriter.WriteHeader(code)
}

// Flush sends what is written at once: each message of a stream is sent
// as it comes.
func (w *streamWriter) Flush() { _ = w.FlushError() }

// FlushError flushes (http.ResponseController calls it), then lifts the
// deadline.
func (w *streamWriter) FlushError() error {
	w.extend()
	rc := http.NewResponseController(w.ResponseWriter)
	if err := rc.Flush(); err != nil {
		return err
	}
	if w.timeout > 0 {
		_ = rc.SetWriteDeadline(time.Time{})
	}
	return nil
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *streamWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// sharedMessage is a server stream's message that the handler sends to
// every stream alike: an event of the log (server/event.go). The Channel
// hands it to the REST side as it is, not a copy, and its REST encodings
// are made once for all the streams that write it, by the first: f makes
// it from the message, and the bytes must not be changed.
type sharedMessage interface {
	proto.Message
	// SharedJSON returns the message's line of a newline-delimited JSON
	// stream ({"result": message}), SharedSSE its Server-Sent Event.
	SharedJSON(f func(proto.Message) []byte) []byte
	SharedSSE(f func(proto.Message) []byte) []byte
}

// rewriteShared is the mux's response rewriter: a stream's message
// received as a sharedMessage (clientStream.RecvMsg) is written as its
// shared encoding, an HttpBody whose bytes grpc-gateway's stream loop
// writes as they are, in place of the empty message it holds. Any other
// response is its own.
func rewriteShared(ctx context.Context, resp proto.Message, json runtime.Marshaler) (any, error) {
	rc, ok := ctx.Value(restCallKey{}).(*restCall)
	if !ok || rc.shared == nil || rc.sharedFor != resp {
		return resp, nil
	}
	sm := rc.shared
	rc.shared, rc.sharedFor = nil, nil
	var b []byte
	if rc.header.Get("Accept") == eventStreamType {
		b = sm.SharedSSE(func(m proto.Message) []byte {
			b, _ := sseMarshaler{json}.Marshal(map[string]any{"result": m})
			return b
		})
	} else {
		b = sm.SharedJSON(func(m proto.Message) []byte {
			b, _ := json.Marshal(map[string]any{"result": m})
			return b
		})
	}
	if b == nil {
		return nil, status.Error(codes.Internal, "internal error")
	}
	return &httpbody.HttpBody{Data: b}, nil
}

// streamErrorHandler completes an error that ends a stream after its first
// line as errorHandler completes the others: its ErrorInfo, "internal
// error" for what the chain did not decide, a message valid UTF-8 and cut.
func streamErrorHandler(_ context.Context, err error) *status.Status {
	if _, ours := err.(*reason.StatusError); !ours {
		err = clipMessage(err)
	}
	var retry time.Duration
	switch status.Code(err) {
	case codes.ResourceExhausted, codes.Unavailable:
		retry = time.Second
	}
	return reason.CompleteError(err, "", retry).GRPCStatus()
}

// sseMarshaler writes a stream's messages as Server-Sent Events, inside
// grpc-gateway's stream loop (runtime.ForwardResponseStream), which hands
// it each message as {"result": message} and a final error as {"error":
// status}. A StreamEventsResponse's Event is written
//
//	id: <the event's id>
//	event: <its type>
//	data: <its data, the resource's JSON>
//
// and its Heartbeat
//
//	id: <the cursor>
//	event: heartbeat
//	data: {"cursor":"<the cursor>"}
//
// (data, so that EventSource-like readers dispatch it: they drop an event
// without data), and an error ends the stream as "event: error" with the
// google.rpc.Status JSON as data; each followed by a blank line
// (Delimiter). Another stream's message would be its JSON as data alone. Anything else (an error before the stream's first event,
// which is an ordinary REST error) is JSON. We write it ourselves: no
// well-kept Go library writes SSE inside grpc-gateway's loop, and the
// format is four lines.
type sseMarshaler struct {
	json runtime.Marshaler
}

func (m sseMarshaler) Marshal(v any) ([]byte, error) {
	switch v := v.(type) {
	case map[string]any:
		switch msg := v["result"].(type) {
		case *shebav1.StreamEventsResponse:
			return m.frame(msg)
		case proto.Message:
			// Another stream's message: its JSON as data, unnamed.
			data, err := m.json.Marshal(msg)
			if err != nil {
				return nil, err
			}
			var b bytes.Buffer
			writeData(&b, data)
			return b.Bytes(), nil
		}
	case map[string]proto.Message:
		if st, ok := v["error"].(*spb.Status); ok {
			data, err := m.json.Marshal(st)
			if err != nil {
				return nil, err
			}
			var b bytes.Buffer
			writeField(&b, "event", "error")
			writeData(&b, data)
			return b.Bytes(), nil
		}
	}
	return m.json.Marshal(v)
}

func (m sseMarshaler) frame(msg *shebav1.StreamEventsResponse) ([]byte, error) {
	var b bytes.Buffer
	switch {
	case msg.GetEvent() != nil:
		e := msg.GetEvent()
		data, err := m.json.Marshal(e.GetData())
		if err != nil {
			return nil, err
		}
		writeField(&b, "id", e.GetId())
		writeField(&b, "event", e.GetType())
		writeData(&b, data)
	case msg.GetHeartbeat() != nil:
		h := msg.GetHeartbeat()
		data, err := m.json.Marshal(h)
		if err != nil {
			return nil, err
		}
		writeField(&b, "id", h.GetCursor())
		writeField(&b, "event", "heartbeat")
		writeData(&b, data)
	default:
		return nil, errors.New("gateway: a stream message that is neither an event nor a heartbeat")
	}
	return b.Bytes(), nil
}

// writeField writes "name: value\n", the value cut at a line break (ids,
// types and cursors are the service's and hold none).
func writeField(b *bytes.Buffer, name, value string) {
	if i := strings.IndexAny(value, "\r\n"); i >= 0 {
		value = value[:i]
	}
	fmt.Fprintf(b, "%s: %s\n", name, value)
}

// writeData writes data as one "data:" line per line of it (protojson
// writes none, but the format allows it).
func writeData(b *bytes.Buffer, data []byte) {
	for line := range bytes.Lines(data) {
		b.WriteString("data: ")
		b.Write(bytes.TrimRight(line, "\r\n"))
		b.WriteByte('\n')
	}
}

func (m sseMarshaler) Unmarshal(data []byte, v any) error { return m.json.Unmarshal(data, v) }
func (m sseMarshaler) NewDecoder(r io.Reader) runtime.Decoder {
	return m.json.NewDecoder(r)
}
func (m sseMarshaler) NewEncoder(w io.Writer) runtime.Encoder { return m.json.NewEncoder(w) }

// ContentType is JSON's: a stream's is StreamContentType.
func (m sseMarshaler) ContentType(v any) string { return m.json.ContentType(v) }

// StreamContentType is text/event-stream.
func (sseMarshaler) StreamContentType(any) string { return eventStreamType }

// Delimiter ends each event with the blank line.
func (sseMarshaler) Delimiter() []byte { return []byte("\n") }
