// Package tracing gives every gRPC call an OpenTelemetry server span: a
// grpc.StatsHandler, so it wraps the whole interceptor chain and sees
// every call, health checks and reflection included.
//
// The span is a child of the caller's span when the call's metadata carries
// W3C Trace Context (traceparent, tracestate); W3C Baggage rides along. It
// is named by the full method without its leading slash
// ("sheba.v1.AccountService/GetAccount") and has the standard RPC
// attributes: rpc.system.name, rpc.method, rpc.response.status_code,
// server.address and server.port. Its status is Error for the codes that
// mean the server failed (Unknown, DeadlineExceeded, Unimplemented,
// Internal, Unavailable, DataLoss), as the semantic conventions for RPC
// servers say.
//
// Whether a span is recorded is the sampler's decision. A span that is not
// recorded costs the extraction of the caller's context and the start of
// the span: its attributes are built only for the spans that are kept.
//
// It returns no codes of its own.
package tracing
