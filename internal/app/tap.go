package app

import (
	"context"
	"log/slog"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/shebasvc/sheba/interceptors/apikey"
	"github.com/shebasvc/sheba/interceptors/metrics"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// The key before the message on gRPC (docs/api.md#authentication). grpc-go
// reads, decompresses and unmarshals a call's message before any handler
// or interceptor runs; without a check before that, a caller without a key
// made the server decode whatever it sent, up to the message bound, before
// the chain refused it (a megabyte of empty repeated strings cost 44 MiB
// and 50 ms of CPU a call). So the business gRPC server checks the key in
// its tap (grpc.InTapHandle), which grpc-go runs on the headers of a new
// stream, before it reads a byte of the message: as REST checks the key
// before it reads a body (server/gateway/keycheck.go), with the chain's own
// authenticator.
//
// A tap rather than method handlers that authenticate before they read the
// message: grpc-go gives a handler its message only through its decode
// function, which the handler could call after a check of its own, but the
// stream, its goroutine and the stats handler's span exist by then, and
// every service would need such a handler; the tap refuses the stream
// before grpc-go makes any of it, for every method at once, and grpc-go
// sends its status, ErrorInfo included, in a trailers-only answer.
//
// grpc-go runs the tap on the connection's reader goroutine, holding the
// transport's lock, before the stats handler's span: so it does no I/O and
// blocks on nothing. A caller it finds rides in the stream's context to the
// chain, whose auth link takes it without hashing the key again; a refusal
// is what the chain's would be (the same error, sheba_rejected_total, the
// grpc_server_* family and sheba_requests_total as the metrics link counts
// them), except that grpc-go's early answer has no x-request-id, and that
// it is logged at most once a second rather than once a call.
//
// Only a.grpc has the tap: the browser protocols' grpc.Server is served
// through ServeHTTP, where grpc-go runs no tap (the gateway checks their
// key from the headers before the body), and the operator's grpc.Server
// serves health alone.

// authTap returns the tap of the business gRPC server: a call of one of
// methods (full method names) that needs a key and brings no valid one is
// refused before its message is read; any other call (health, reflection,
// a path no service has) goes on untouched.
func authTap(authn *apikey.Authenticator, methods []string, m *metrics.Metrics, log *slog.Logger) tap.ServerInHandle {
	business := make(map[string]bool, len(methods))
	for _, method := range methods {
		business[method] = true
	}
	logged := &rate.Sometimes{Interval: time.Second}
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if !business[info.FullMethodName] {
			return ctx, nil
		}
		tapped, err := authn.AuthenticateMetadata(ctx, info.FullMethodName, info.Header)
		if err == nil {
			return tapped, nil
		}
		m.Refused(ctx, info.FullMethodName, err)
		logged.Do(func() { go logRefused(ctx, log, info.FullMethodName, err) })
		return nil, err
	}
}

// logRefused logs a call refused by the tap, with what the request line of
// a call refused in the chain says of it (docs/observability.md).
func logRefused(ctx context.Context, log *slog.Logger, method string, err error) {
	st := status.Convert(err)
	transport, addr := transportOf(ctx)
	log.LogAttrs(context.WithoutCancel(ctx), slog.LevelInfo, "request refused before its message (logged at most once a second)",
		slog.String("method", method),
		slog.String("transport", transport),
		slog.String("code", st.Code().String()),
		slog.String("reason", reason.Of(st)),
		slog.String("peer", addr),
		slog.String("error", st.Message()),
	)
}
