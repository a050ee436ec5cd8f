package app

import (
	"context"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// newTracerProvider builds the tracer provider from the standard OTEL_*
// variables: the exporter from OTEL_TRACES_EXPORTER and OTEL_EXPORTER_OTLP_*
// (OTLP over gRPC or HTTP), the sampler from OTEL_TRACES_SAMPLER, the
// service name from OTEL_SERVICE_NAME (default "sheba"), the version from
// version. With none of
// OTEL_TRACES_EXPORTER and OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT set, tracing
// is off and costs nothing (docs/observability.md#traces). flush sends the spans
// still buffered and stops the exporter.
func newTracerProvider(ctx context.Context, lookup func(string) (string, bool), version string) (tp trace.TracerProvider, flush func(context.Context) error, err error) {
	on := false
	for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		if v, ok := lookup(k); ok && v != "" {
			on = true
		}
	}
	if !on {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, nil, err
	}
	// Later options win: the environment overrides the defaults.
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("sheba"), semconv.ServiceVersion(version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, nil, err
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return sdk, sdk.Shutdown, nil
}
