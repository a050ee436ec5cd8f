package requestlog

import (
	"context"
	"crypto/rand"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/interceptors/callinfo"
)

// RequestIDKey is the request and response metadata of the request id;
// the REST gateway passes the X-Request-Id header in it, both ways.
const RequestIDKey = "x-request-id"

const maxRequestIDLen = 128

type options struct {
	transport func(ctx context.Context) (transport, peer string)
}

// Option configures the interceptor.
type Option func(*options)

// WithTransport names the transport and the peer of a call (default "grpc"
// and no peer).
func WithTransport(f func(ctx context.Context) (transport, peer string)) Option {
	return func(o *options) { o.transport = f }
}

// UnaryServerInterceptor assigns request ids and logs one line per call to
// log.
func UnaryServerInterceptor(log *slog.Logger, opts ...Option) grpc.UnaryServerInterceptor {
	o := options{transport: func(context.Context) (string, string) { return "grpc", "" }}
	for _, opt := range opts {
		opt(&o)
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		ctx, ci := callinfo.New(ctx, requestID(ctx))
		// Fails only outside a server call; the id still goes in the log.
		_ = grpc.SetHeader(ctx, metadata.MD{RequestIDKey: {ci.RequestID}})

		resp, err := handler(ctx, req)

		code := status.Code(err)
		level := slog.LevelInfo
		if serverFault(code) {
			level = slog.LevelWarn
		}
		if !log.Enabled(ctx, level) {
			return resp, err
		}
		transport, peer := o.transport(ctx)
		sc := trace.SpanContextFromContext(ctx)
		attrs := []slog.Attr{
			slog.String("method", info.FullMethod),
			slog.String("transport", transport),
			slog.String("code", code.String()),
			slog.Duration("duration", time.Since(start)),
			slog.String("request_id", ci.RequestID),
			slog.String("api_key_id", ci.CallerID),
			slog.String("peer", peer),
		}
		if ci.Hook != "" {
			attrs = append(attrs, slog.String("hook", ci.Hook))
		}
		if ci.HookError != "" {
			attrs = append(attrs, slog.String("hook_error", ci.HookError))
		}
		if sc.IsValid() {
			attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
		}
		if err != nil {
			// The status message is what the client saw; internal detail
			// was logged where it was mapped.
			attrs = append(attrs, slog.String("error", status.Convert(err).Message()))
		}
		log.LogAttrs(ctx, level, "request", attrs...)
		return resp, err
	}
}

// requestID returns the caller's x-request-id if it is sane, else a new one.
func requestID(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, RequestIDKey); len(v) > 0 && validRequestID(v[0]) {
		return v[0]
	}
	return rand.Text()
}

func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := range len(id) {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

func serverFault(c codes.Code) bool {
	switch c {
	case codes.Internal, codes.Unknown, codes.DataLoss, codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}
