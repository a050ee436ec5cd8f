package tracing_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/interceptortest"
	"github.com/shebasvc/sheba/interceptors/tracing"
)

// ping answers with the error whose code the caller's x-want-code names
// ("" for none).
func ping(ctx context.Context) (*shebav1.PingResponse, error) {
	switch v := metadata.ValueFromIncomingContext(ctx, "x-want-code"); strings.Join(v, "") {
	case "internal":
		return nil, status.Error(codes.Internal, "broken")
	case "invalid":
		return nil, status.Error(codes.InvalidArgument, "bad request")
	}
	return interceptortest.Pong(ctx)
}

func TestServerSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	client := interceptortest.ServeWith(t, []grpc.ServerOption{grpc.StatsHandler(tracing.NewServerHandler(tp))}, ping)

	for _, test := range []struct {
		want       string
		traceID    string
		flags      string // traceparent flags: 01 sampled, 00 not
		wantSpan   bool
		wantCode   string
		wantStatus otelcodes.Code
	}{
		{"", "7bf92f3577b34da6a3ce929d0e0e4701", "01", true, "OK", otelcodes.Unset},
		{"invalid", "7bf92f3577b34da6a3ce929d0e0e4702", "01", true, "INVALID_ARGUMENT", otelcodes.Unset},
		{"internal", "7bf92f3577b34da6a3ce929d0e0e4703", "01", true, "INTERNAL", otelcodes.Error},
		{"", "7bf92f3577b34da6a3ce929d0e0e4704", "00", false, "", otelcodes.Unset},
	} {
		t.Run(test.want+"/"+test.flags, func(t *testing.T) {
			const parent = "00f067aa0ba902b7"
			ctx := metadata.AppendToOutgoingContext(t.Context(), "traceparent", "00-"+test.traceID+"-"+parent+"-"+test.flags, "x-want-code", test.want)
			_, _ = client.Ping(ctx, &shebav1.PingRequest{})
			var got []tracetest.SpanStub
			// The server span ends in the stats handler after the answer
			// has left: the client may see the answer first. An unsampled
			// call is given a moment to show a span it must not have.
			wait := 2 * time.Second
			if !test.wantSpan {
				wait = 200 * time.Millisecond
			}
			for deadline := time.Now().Add(wait); ; time.Sleep(10 * time.Millisecond) {
				got = got[:0]
				for _, s := range exp.GetSpans() {
					if s.SpanContext.TraceID().String() == test.traceID {
						got = append(got, s)
					}
				}
				if len(got) > 0 && test.wantSpan || time.Now().After(deadline) {
					break
				}
			}
			if !test.wantSpan {
				if len(got) != 0 {
					t.Fatalf("got %d spans of an unsampled caller, want none", len(got))
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("got %d spans in trace %s, want 1", len(got), test.traceID)
			}
			s := got[0]
			if s.Name != "sheba.v1.PingService/Ping" || s.SpanKind != trace.SpanKindServer {
				t.Errorf("span: got %q kind %v, want %q kind server", s.Name, s.SpanKind, "sheba.v1.PingService/Ping")
			}
			if s.Parent.SpanID().String() != parent {
				t.Errorf("parent: got %s, want the caller's %s", s.Parent.SpanID(), parent)
			}
			for _, want := range []attribute.KeyValue{
				attribute.String("rpc.system.name", "grpc"),
				attribute.String("rpc.method", "sheba.v1.PingService/Ping"),
				attribute.String("rpc.response.status_code", test.wantCode),
				attribute.String("server.address", "127.0.0.1"),
			} {
				if !has(s.Attributes, want) {
					t.Errorf("span lacks %v: %v", want, s.Attributes)
				}
			}
			if s.Status.Code != test.wantStatus {
				t.Errorf("status: got %v, want %v", s.Status.Code, test.wantStatus)
			}
		})
	}
}

func has(attrs []attribute.KeyValue, want attribute.KeyValue) bool {
	for _, a := range attrs {
		if a == want {
			return true
		}
	}
	return false
}
