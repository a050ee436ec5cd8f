package tracing_test

import (
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"

	"github.com/shebasvc/sheba/interceptors/tracing"
)

func ExampleNewServerHandler() {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01))))
	srv := grpc.NewServer(grpc.StatsHandler(tracing.NewServerHandler(tp)))
	defer srv.Stop()
	fmt.Println(tracing.ScopeName)
	// Output: github.com/shebasvc/sheba/interceptors/tracing
}
