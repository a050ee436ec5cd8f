package tracing_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"

	"github.com/shebasvc/sheba/interceptors/tracing"
)

// BenchmarkTagRPC starts and ends the span of a call that brings no trace
// context, with a sampler that drops it.
func BenchmarkTagRPC(b *testing.B) {
	h := tracing.NewServerHandler(sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample())))
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(":authority", "x", "content-type", "application/grpc", "user-agent", "grpc-go", "x-api-key", "k"))
	info := &stats.RPCTagInfo{FullMethodName: "/sheba.v1.PingService/Ping"}
	b.ReportAllocs()
	for b.Loop() {
		c := h.TagRPC(ctx, info)
		h.HandleRPC(c, &stats.End{})
	}
}
