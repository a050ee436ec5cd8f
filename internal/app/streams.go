package app

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/apikey"
	"github.com/shebasvc/sheba/interceptors/callinfo"
	"github.com/shebasvc/sheba/interceptors/drain"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/interceptors/retryafter"
	"github.com/shebasvc/sheba/server"
)

// Stream end reasons of sheba_streams_ended_total.
const (
	endClient      = "client"
	endMaxDuration = "max_duration"
	endShutdown    = "shutdown"
	endTooSlow     = "too_slow"
	endError       = "error"
)

// streamRetry is when a stream refused for too many open streams may try
// again: a slot frees when any stream ends.
const streamRetry = time.Second

// errTooManyEventStreams refuses an event stream over events.max_streams
// or events.max_streams_per_key.
var errTooManyEventStreams = reason.Error(codes.ResourceExhausted, reason.TooManyStreams,
	"too many open event streams; retry later", &errdetails.RetryInfo{RetryDelay: durationpb.New(streamRetry)})

// streamSlots counts the open event streams of the replica and of each
// API key, in memory (events.max_streams, events.max_streams_per_key). A
// mutex and a map rather than a semaphore per key: a key's count must go
// when its last stream ends, so the map stays bounded by the open
// streams. It is safe for concurrent use.
type streamSlots struct {
	max, perKey int
	mu          sync.Mutex
	open        int
	byKey       map[string]int
}

func newStreamSlots(max, perKey int) *streamSlots {
	return &streamSlots{max: max, perKey: perKey, byKey: make(map[string]int)}
}

// acquire takes a slot for a stream of key, or reports false.
func (s *streamSlots) acquire(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open >= s.max || s.byKey[key] >= s.perKey {
		return false
	}
	s.open++
	s.byKey[key]++
	return true
}

// release frees a slot of key.
func (s *streamSlots) release(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open--
	if s.byKey[key]--; s.byKey[key] <= 0 {
		delete(s.byKey, key)
	}
}

// streamMetrics are the event streams' own metrics.
type streamMetrics struct {
	open   prometheus.Gauge
	events prometheus.Counter
	ended  *prometheus.CounterVec
}

func newStreamMetrics(reg prometheus.Registerer) (*streamMetrics, error) {
	m := &streamMetrics{
		open: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sheba_streams_open",
			Help: "Event streams open on this replica (StreamEvents, every transport)."}),
		events: prometheus.NewCounter(prometheus.CounterOpts{Name: "sheba_stream_events_total",
			Help: "Events sent on event streams, each counted once per stream that sent it."}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sheba_streams_ended_total",
			Help: "Event streams ended, by reason: client, max_duration, shutdown, too_slow, error."}, []string{"reason"}),
	}
	for _, r := range []string{endClient, endMaxDuration, endShutdown, endTooSlow, endError} {
		m.ended.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{m.open, m.events, m.ended} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// plannedStreamEnd reports whether err ended an event stream as the server
// planned (events.max_duration, shutdown): an UNAVAILABLE its client
// resumes after, logged as no fault.
func plannedStreamEnd(err error) bool {
	return errors.Is(err, server.ErrStreamEnded) || errors.Is(err, drain.ErrShuttingDown)
}

// endReason classifies how an admitted stream ended, from its handler's
// error and its context.
func endReason(ctx context.Context, err error) string {
	switch {
	case errors.Is(err, server.ErrStreamEnded):
		return endMaxDuration
	case errors.Is(err, server.ErrStreamTooSlow):
		return endTooSlow
	case err == nil, status.Code(err) == codes.Canceled, errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return endClient
	case ctx.Err() != nil && (status.Code(err) == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded)):
		// The client's own deadline (grpc-timeout): the client's end.
		return endClient
	case errors.Is(err, drain.ErrShuttingDown):
		return endShutdown
	}
	return endError
}

// streamOpening is what opens a business stream: the chain's links, in
// their order, run once for the whole stream, so that it is logged and
// counted once, at its end, with its final code; the links that decide
// its opening (auth, bounds, the rate limits, validation, the hook,
// failfast) run under limits.timeout, which bounds the opening only.
// Neither the in-flight limit (a stream is not a call in flight: it has
// slots of its own, events.max_streams and events.max_streams_per_key),
// nor idempotency (a stream changes nothing), nor the standby link (a
// stream reads the primary) take part.
type streamOpening struct {
	chain   grpc.UnaryServerInterceptor
	slots   *streamSlots
	metrics *streamMetrics
	// sent counts a message a stream of a method sent
	// (grpc_server_msg_sent_total).
	sent func(method string)
	// streams are the business server-streaming methods by full name.
	streams map[string]shebav1.MethodTable
}

// streamSkippedLinks name the links of chainLinks a stream does not pass.
var streamSkippedLinks = map[string]bool{"inflight": true, "idempotency": true, "standby": true}

func newStreamOpening(d chainDeps, c eventsLimits, m *streamMetrics) *streamOpening {
	var links []grpc.UnaryServerInterceptor
	for _, l := range chainLinks(d) {
		switch {
		case streamSkippedLinks[l.name]:
		case l.name == "timeout":
			links = append(links, openingTimeout(d.limits.Timeout))
		default:
			links = append(links, l.interceptor)
		}
	}
	streams := make(map[string]shebav1.MethodTable)
	for _, svc := range shebav1.Services {
		for _, mt := range svc.Methods {
			if mt.ServerStreams {
				streams[mt.FullName] = mt
			}
		}
	}
	return &streamOpening{chain: chainUnary(links...), slots: newStreamSlots(c.maxStreams, c.maxPerKey), metrics: m,
		sent: d.metrics.MessageSent, streams: streams}
}

// openingTimeout is the timeout link of a stream: the links after it
// decide the opening under limits.timeout (or the client's sooner
// deadline), and the stream itself runs without it (Open).
func openingTimeout(max time.Duration) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, cancel := context.WithTimeout(ctx, max)
		defer cancel()
		return handler(ctx, req)
	}
}

// eventsLimits are the limits of event streams (the events section).
type eventsLimits struct{ maxStreams, maxPerKey int }

// Open opens a stream of method, whose request is req, on the stream
// context ctx: through the chain (see streamOpening), then, admitted and
// given a stream slot, it sends the headers the chain left and runs
// serve with the request the chain passed on (the hook may replace it)
// and the chain's context (the call's Info, the caller) ending with ctx,
// not at the opening's deadline. Refused, it returns the chain's answer
// and serve does not run. The slot is freed when serve returns.
func (o *streamOpening) Open(ctx context.Context, method string, req any, serve func(ctx context.Context, req any) error) error {
	info := &grpc.UnaryServerInfo{FullMethod: method}
	_, err := o.chain(ctx, req, info, func(octx context.Context, req any) (any, error) {
		key := apikey.IDFromContext(octx)
		if !o.slots.acquire(key) {
			retryafter.Set(octx, streamRetry)
			return nil, errTooManyEventStreams
		}
		defer o.slots.release(key)
		if ci := callinfo.FromContext(octx); ci != nil {
			if md := ci.Header(); len(md) > 0 {
				// Now, not when the chain ends with the stream.
				_ = grpc.SendHeader(octx, md)
			}
		}
		sctx, cancel := context.WithCancel(context.WithoutCancel(octx))
		defer cancel()
		stop := context.AfterFunc(ctx, cancel)
		defer stop()
		o.metrics.open.Inc()
		defer o.metrics.open.Dec()
		err := serve(sctx, req)
		o.metrics.ended.WithLabelValues(endReason(ctx, err)).Inc()
		return nil, err
	})
	return err
}

// StreamServerInterceptor is the stream side of the chain on a
// grpc.Server: a business server-streaming method's request is read, then
// the stream opens through Open. Other streams (health Watch, reflection)
// pass through others (nil: to their handler).
func (o *streamOpening) StreamServerInterceptor(others grpc.StreamServerInterceptor) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		mt, ok := o.streams[info.FullMethod]
		if !ok {
			if others == nil {
				return handler(srv, ss)
			}
			return others(srv, ss, info, handler)
		}
		req, err := server.RecvRequest(ss, mt.NewRequest)
		if err != nil {
			return err
		}
		return o.Open(ss.Context(), info.FullMethod, req, func(ctx context.Context, req any) error {
			return handler(srv, &openedStream{ServerStream: ss, ctx: ctx, req: req, sent: func() { o.sent(info.FullMethod) }})
		})
	}
}

// openedStream is a stream whose request was read already: its handler's
// first RecvMsg gets that request, and any later one io.EOF, as a
// server-streaming call has one request.
type openedStream struct {
	grpc.ServerStream
	ctx  context.Context
	req  any
	read bool
	// sent counts a message sent.
	sent func()
}

func (s *openedStream) Context() context.Context { return s.ctx }

func (s *openedStream) SendMsg(m any) error {
	if err := s.ServerStream.SendMsg(m); err != nil {
		return err
	}
	s.sent()
	return nil
}

func (s *openedStream) RecvMsg(m any) error {
	if s.read {
		return io.EOF
	}
	s.read = true
	dst, ok := m.(proto.Message)
	src, ok2 := s.req.(proto.Message)
	if !ok || !ok2 {
		return errInternal
	}
	proto.Reset(dst)
	proto.Merge(dst, src)
	return nil
}
