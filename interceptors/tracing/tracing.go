package tracing

import (
	"context"
	"net"
	"strconv"
	"strings"

	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/interceptors/reason"
)

// ScopeName names the tracer of the spans.
const ScopeName = "github.com/shebasvc/sheba/interceptors/tracing"

// ServerHandler is the stats.Handler that makes the server spans. It is
// safe for concurrent use.
//
// It is ours rather than otelgrpc's for a measured reason: otelgrpc builds
// every span's attributes and its metrics' attribute list in TagRPC,
// copying the call's whole metadata to read its traceparent, whether the
// span is sampled or not: about twenty allocations per call
// (BenchmarkGRPCPing, sheba-unsampled against sheba). Here a call whose
// span does not record reads only the propagation keys and starts the span
// (BenchmarkTagRPC: the span and its context, two allocations, both the
// SDK's).
type ServerHandler struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	// fields are the metadata keys prop reads.
	fields []string
	start  []trace.SpanStartOption
}

// NewServerHandler returns a ServerHandler whose spans go to tp.
func NewServerHandler(tp trace.TracerProvider) *ServerHandler {
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	return &ServerHandler{
		tracer: tp.Tracer(ScopeName),
		prop:   prop,
		fields: prop.Fields(),
		start:  []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)},
	}
}

// TagRPC starts the call's span.
func (h *ServerHandler) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if h.carries(ctx) {
		ctx = h.prop.Extract(ctx, incomingCarrier{ctx})
	}
	name := strings.TrimPrefix(info.FullMethodName, "/")
	ctx, span := h.tracer.Start(ctx, name, h.start...)
	if span.IsRecording() {
		span.SetAttributes(semconv.RPCSystemNameGRPC, semconv.RPCMethod(name))
	}
	return ctx
}

// carries reports whether the call's metadata has any of the propagator's
// fields. Without one there is nothing to extract, and the carrier, which
// costs an allocation as an interface, is not made.
func (h *ServerHandler) carries(ctx context.Context) bool {
	for _, f := range h.fields {
		if metadata.ValueFromIncomingContext(ctx, f) != nil {
			return true
		}
	}
	return false
}

// HandleRPC completes the call's span: its server address when the call's
// headers arrive, its status when it ends.
func (h *ServerHandler) HandleRPC(ctx context.Context, rs stats.RPCStats) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	switch rs := rs.(type) {
	case *stats.InHeader:
		if rs.LocalAddr == nil {
			return
		}
		if host, port, err := net.SplitHostPort(rs.LocalAddr.String()); err == nil {
			span.SetAttributes(semconv.ServerAddress(host))
			if p, err := strconv.Atoi(port); err == nil {
				span.SetAttributes(semconv.ServerPort(p))
			}
		}
	case *stats.End:
		code := status.Code(rs.Error)
		name := "OK"
		if code != codes.OK {
			name = reason.ForCode(code) // the canonical UPPER_SNAKE name
		}
		span.SetAttributes(semconv.RPCResponseStatusCode(name))
		if serverFault(code) {
			span.SetStatus(otelcodes.Error, status.Convert(rs.Error).Message())
		}
		span.End()
	}
}

// TagConn returns ctx: spans are per call.
func (h *ServerHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

// HandleConn does nothing: spans are per call.
func (h *ServerHandler) HandleConn(context.Context, stats.ConnStats) {}

// serverFault reports whether c says the server failed rather than the
// client.
func serverFault(c codes.Code) bool {
	switch c {
	case codes.Unknown, codes.DeadlineExceeded, codes.Unimplemented, codes.Internal, codes.Unavailable, codes.DataLoss:
		return true
	}
	return false
}

// incomingCarrier reads the call's incoming metadata one key at a time,
// without copying the rest of it.
type incomingCarrier struct {
	ctx context.Context
}

func (c incomingCarrier) Get(key string) string {
	if v := metadata.ValueFromIncomingContext(c.ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set does nothing: a server only reads the caller's context.
func (c incomingCarrier) Set(string, string) {}

func (c incomingCarrier) Keys() []string {
	md, _ := metadata.FromIncomingContext(c.ctx)
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	return keys
}
