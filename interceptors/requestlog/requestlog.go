package requestlog

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/hex"
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
	planned   func(err error) bool
	now       func() time.Time // time.Now; tests set a clock
}

// Option configures the interceptor.
type Option func(*options)

// WithTransport names the transport and the peer of a call (default "grpc"
// and no peer).
func WithTransport(f func(ctx context.Context) (transport, peer string)) Option {
	return func(o *options) { o.transport = f }
}

// WithPlannedEnds names the errors that end a call as the server planned,
// not as a failure, whatever their code: logged at Info. sheba's event
// streams end with UNAVAILABLE after events.max_duration and at shutdown,
// for their clients to resume.
func WithPlannedEnds(f func(err error) bool) Option {
	return func(o *options) { o.planned = f }
}

// UnaryServerInterceptor assigns request ids and logs one line per call to
// log.
func UnaryServerInterceptor(log *slog.Logger, opts ...Option) grpc.UnaryServerInterceptor {
	o := options{transport: func(context.Context) (string, string) { return "grpc", "" }, now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	h := log.Handler()
	// On sheba's own JSON handler the line is written without slog's
	// record and handler (JSONHandler.writeLine); on any other handler, as
	// slog would.
	direct, _ := h.(*JSONHandler)
	if direct != nil && !direct.direct {
		direct = nil
	}
	l := &lineLogger{o: &o, h: h, direct: direct}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := o.now()
		ci := callinfo.FromContext(ctx)
		if ci == nil {
			// Whoever makes the Info sends its headers (callinfo.NewContext):
			// sheba's chain makes it with the allocation of its own context.
			c := &callinfo.Context{Context: ctx}
			ctx, ci = c, &c.Info
			// Fails only outside a server call; the id still goes in the
			// log.
			defer func() { _ = grpc.SendHeader(ctx, ci.Header()) }()
		}
		ci.RequestID = requestID(ctx, ci)
		ci.SetHeader(RequestIDKey, ci.RequestID)

		resp, err := handler(ctx, req)
		l.line(ctx, info, ci, start, err)
		return resp, err
	}
}

// lineLogger writes the request line of a call.
type lineLogger struct {
	o      *options
	h      slog.Handler
	direct *JSONHandler
}

// line writes the request line of the call of info that began at start
// and ended with err. It is a function of its own, never inlined, so that
// its frame (the line's attributes, over 2 KiB with what it inlines) is on
// the stack only after the call: in the interceptor's own frame it was
// there for the whole chain below, and grew each call's new goroutine
// stack once more (runtime.copystack was 15% of BenchmarkGRPCPing's CPU).
//
//go:noinline
func (l *lineLogger) line(ctx context.Context, info *grpc.UnaryServerInfo, ci *callinfo.Info, start time.Time, err error) {
	o, h, direct := l.o, l.h, l.direct
	code := status.Code(err)
	level := slog.LevelInfo
	if serverFault(code) && (o.planned == nil || !o.planned(err)) {
		level = slog.LevelWarn
	}
	if !h.Enabled(ctx, level) {
		return
	}
	transport, peer := o.transport(ctx)
	end := o.now()
	attrs := [...]slog.Attr{
		slog.String("method", info.FullMethod),
		slog.String("transport", transport),
		slog.String("code", code.String()),
		slog.Duration("duration", end.Sub(start)),
		slog.String("request_id", ci.RequestID),
		slog.String("api_key_id", ci.CallerID),
		slog.String("peer", peer),
		{}, {}, {}, {}, {}, // room for the optional ones
	}
	n := 7
	if ci.Hook != "" {
		attrs[n] = slog.String("hook", ci.Hook)
		n++
	}
	if ci.HookError != "" {
		attrs[n] = slog.String("hook_error", ci.HookError)
		n++
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		traceID, spanID := traceIDs(ci, sc)
		attrs[n], attrs[n+1] = slog.String("trace_id", traceID), slog.String("span_id", spanID)
		n += 2
	}
	if err != nil {
		// The status message is what the client saw; internal detail
		// was logged where it was mapped.
		attrs[n] = slog.String("error", status.Convert(err).Message())
		n++
	}
	if direct != nil && direct.writeLine(end, level, attrs[:n]) {
		return
	}
	// The record goes to the handler straight, as Logger.LogAttrs would
	// hand it but without the caller's program counter, which sheba's
	// handlers do not print (no AddSource) and which cost a tenth of
	// the line (runtime.Callers).
	r := slog.NewRecord(end, level, "request", 0)
	// Added at once, so that the record grows its attributes past the
	// five it holds inline once.
	r.AddAttrs(attrs[:n]...)
	_ = h.Handle(ctx, r)
}

// requestID returns the caller's x-request-id if it is sane, else a new
// one, as crypto/rand.Text makes it (16 random bytes in 26 characters of
// base32) but in the Info's memory.
func requestID(ctx context.Context, ci *callinfo.Info) string {
	if v := metadata.ValueFromIncomingContext(ctx, RequestIDKey); len(v) > 0 && validRequestID(v[0]) {
		return v[0]
	}
	var src [16]byte
	_, _ = rand.Read(src[:])
	return ci.String(requestIDEncoding.AppendEncode(ci.Buffer(), src[:]))
}

var requestIDEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// traceIDs returns the trace and span ids of sc in hex, in the Info's
// memory: a call that is traced but not sampled makes no allocation for
// them either.
func traceIDs(ci *callinfo.Info, sc trace.SpanContext) (traceID, spanID string) {
	tid, sid := sc.TraceID(), sc.SpanID()
	b := hex.AppendEncode(ci.Buffer(), tid[:])
	n := len(b)
	s := ci.String(hex.AppendEncode(b, sid[:]))
	return s[:n], s[n:]
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
