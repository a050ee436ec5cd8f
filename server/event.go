package server

import (
	"context"
	"errors"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/webhooks/eventlog"
)

// EventOptions configures StreamEvents (the events section).
type EventOptions struct {
	// Hub follows the event log. Nil: StreamEvents answers UNAVAILABLE.
	Hub *eventlog.Hub
	// Heartbeat is the silence after which a stream gets a heartbeat
	// (events.heartbeat; 0: 15s).
	Heartbeat time.Duration
	// MaxDuration ends a stream, resumable, after this long
	// (events.max_duration; 0: never).
	MaxDuration time.Duration
	// OpenTimeout bounds the wait for the hub when a stream opens
	// (limits.timeout; 0: 5s).
	OpenTimeout time.Duration
	// OnEvent is called for each event a stream sends (nil: nothing).
	OnEvent func()
}

// The eventlog.Event.Encoded kinds of an event's StreamEventsResponse.
const (
	// EncodingProto is protobuf binary: gRPC, and any transport that
	// sends the same bytes (Connect proto, gRPC-Web), shares it.
	EncodingProto = iota
	// encodingJSON is REST's line of newline-delimited JSON, and
	// encodingSSE its Server-Sent Event (encodedMessage.SharedJSON and
	// SharedSSE).
	encodingJSON
	encodingSSE
)

// The answers of StreamEvents, made once.
var (
	errCursorExpired = reason.Error(codes.OutOfRange, reason.EventCursorExpired,
		"after_event_id is older than events.retention, or was never issued")
	// ErrStreamTooSlow cuts a stream whose client did not read.
	ErrStreamTooSlow = reason.Error(codes.ResourceExhausted, reason.StreamTooSlow,
		"stream cut: the client did not read its events in time; resume after the last id or cursor received",
		&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	// ErrStreamEnded ends a stream after events.max_duration.
	ErrStreamEnded = reason.Error(codes.Unavailable, reason.StreamEnded,
		"stream ended after events.max_duration; resume after the last id or cursor received",
		&errdetails.RetryInfo{RetryDelay: durationpb.New(0)})
	errNoHub = reason.OutcomeDatabaseDown.Err()
)

// eventServer implements shebav1.EventServiceServer over the event log's
// hub (webhooks/eventlog).
type eventServer struct {
	shebav1.UnimplementedEventServiceServer
	o EventOptions
}

func newEventServer(o EventOptions) *eventServer {
	if o.Heartbeat <= 0 {
		o.Heartbeat = 15 * time.Second
	}
	if o.OpenTimeout <= 0 {
		o.OpenTimeout = 5 * time.Second
	}
	if o.OnEvent == nil {
		o.OnEvent = func() {}
	}
	return &eventServer{o: o}
}

// StreamEvents streams the events of the types asked for, after
// after_event_id or from now: a heartbeat with the stream's cursor at once
// when no event is due and after every Heartbeat of silence. It ends with
// OUT_OF_RANGE EVENT_CURSOR_EXPIRED for an after it cannot resume from,
// RESOURCE_EXHAUSTED STREAM_TOO_SLOW when its client does not read,
// UNAVAILABLE STREAM_ENDED after MaxDuration, and the stream's context's
// error (the client left, or the drain at shutdown ended it). The request
// was validated by the chain's opening (internal/app).
func (s *eventServer) StreamEvents(req *shebav1.StreamEventsRequest, stream grpc.ServerStreamingServer[shebav1.StreamEventsResponse]) error {
	ctx := stream.Context()
	h := s.o.Hub
	if h == nil {
		return errNoHub
	}
	sub, err := s.subscribe(ctx, req)
	if err != nil {
		return err
	}
	defer sub.Close()
	if s.o.MaxDuration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, s.o.MaxDuration, ErrStreamEnded)
		defer cancel()
	}
	// The first message at once: an event if one is due, else a
	// heartbeat.
	wait := time.Duration(0)
	for {
		e, err := next(ctx, sub, wait)
		wait = s.o.Heartbeat
		switch {
		case err == nil:
			// Sent through the stream as a message Codec sends as it is
			// (encodedMessage): the event's bytes, made once for every
			// stream.
			if err := stream.SendMsg(&encodedMessage{b: e.Encoded(EncodingProto, encodeEvent), e: e}); err != nil {
				return err
			}
			s.o.OnEvent()
		case errors.Is(err, errSilence):
			hb := &shebav1.StreamEventsResponse{Message: &shebav1.StreamEventsResponse_Heartbeat{
				Heartbeat: &shebav1.Heartbeat{Cursor: h.Cursor(sub.Position())}}}
			if err := stream.Send(hb); err != nil {
				return err
			}
		case errors.Is(err, eventlog.ErrTooSlow):
			return ErrStreamTooSlow
		case errors.Is(err, eventlog.ErrStopped):
			return errNoHub
		case ctx.Err() != nil:
			if cause := context.Cause(ctx); errors.Is(cause, ErrStreamEnded) {
				return ErrStreamEnded
			}
			// CANCELLED or DEADLINE_EXCEEDED, as the client sees it, in
			// the log and the metrics too.
			return status.FromContextError(ctx.Err()).Err()
		default:
			return reason.Answer(ctx, nil, "stream events", err, reason.Own{})
		}
	}
}

// subscribe parses the request's after and subscribes to the hub, waiting
// at most OpenTimeout for it (the hub starts with the database).
func (s *eventServer) subscribe(ctx context.Context, req *shebav1.StreamEventsRequest) (*eventlog.Subscriber, error) {
	open, cancel := context.WithTimeout(ctx, s.o.OpenTimeout)
	defer cancel()
	after, err := s.o.Hub.ParseAfter(open, req.GetAfterEventId())
	if errors.Is(err, eventlog.ErrCursorExpired) {
		return nil, errCursorExpired
	}
	if err == nil {
		var sub *eventlog.Subscriber
		if sub, err = s.o.Hub.Subscribe(open, req.GetEventTypes(), after); err == nil {
			return sub, nil
		}
	}
	if ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, eventlog.ErrStopped)) {
		// The hub has not started (the database is down) or stopped.
		return nil, errNoHub
	}
	return nil, reason.Answer(ctx, nil, "stream events", err, reason.Own{})
}

// errSilence is next's answer when no event came within its wait.
var errSilence = errors.New("no event")

// next returns the subscriber's next event, or errSilence when none is
// ready within wait (0: none ready now).
func next(ctx context.Context, sub *eventlog.Subscriber, wait time.Duration) (*eventlog.Event, error) {
	if wait == 0 {
		// A context already done: Next returns an event ready or catches
		// up; an expired one says none is due.
		done, cancel := context.WithCancel(ctx)
		cancel()
		e, err := sub.Next(done)
		if err != nil && ctx.Err() == nil && errors.Is(err, context.Canceled) {
			return nil, errSilence
		}
		return e, err
	}
	w, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	e, err := sub.Next(w)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil, errSilence
	}
	return e, err
}

// encodeEvent returns the StreamEventsResponse of e in protobuf binary.
// The data was checked JSON when the event was written: one that does not
// convert to a Struct is sent without it rather than stopping every stream.
func encodeEvent(e *eventlog.Event) []byte {
	ev := &shebav1.Event{Id: e.ID, Type: e.Type, CreateTime: timestamppb.New(e.CreateTime)}
	if len(e.Data) > 0 {
		data := new(structpb.Struct)
		if err := data.UnmarshalJSON(e.Data); err == nil {
			ev.Data = data
		}
	}
	b, err := proto.Marshal(&shebav1.StreamEventsResponse{Message: &shebav1.StreamEventsResponse_Event{Event: ev}})
	if err != nil {
		return nil
	}
	return b
}

// encodedMessage is a StreamEventsResponse already in protobuf binary, the
// event e's. Codec.Marshal sends its bytes as they are; the REST side its
// REST encodings, made once for e too (SharedJSON, SharedSSE); any other
// codec, or the in-process channel's proto.Merge, sees the message itself
// (ProtoReflect decodes it, for that caller alone).
type encodedMessage struct {
	b   []byte
	e   *eventlog.Event
	msg *shebav1.StreamEventsResponse
}

func (m *encodedMessage) encoded() []byte { return m.b }

// SharedJSON returns f of the message, made once for the event: the REST
// gateway's newline-delimited JSON line.
func (m *encodedMessage) SharedJSON(f func(proto.Message) []byte) []byte {
	return m.e.Encoded(encodingJSON, func(*eventlog.Event) []byte { return f(m.message()) })
}

// SharedSSE returns f of the message, made once for the event: the REST
// gateway's Server-Sent Event.
func (m *encodedMessage) SharedSSE(f func(proto.Message) []byte) []byte {
	return m.e.Encoded(encodingSSE, func(*eventlog.Event) []byte { return f(m.message()) })
}

// message returns the message, decoded.
func (m *encodedMessage) message() *shebav1.StreamEventsResponse {
	if m.msg == nil {
		m.msg = new(shebav1.StreamEventsResponse)
		_ = proto.Unmarshal(m.b, m.msg)
	}
	return m.msg
}

func (m *encodedMessage) ProtoReflect() protoreflect.Message { return m.message().ProtoReflect() }
