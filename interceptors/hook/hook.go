package hook

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/shebasvc/sheba/interceptors/callinfo"
	"github.com/shebasvc/sheba/interceptors/idempotency"
	"github.com/shebasvc/sheba/interceptors/ratelimit"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/interceptors/requestlog"
	"github.com/shebasvc/sheba/interceptors/retryafter"
)

// errUnavailable answers a call whose hook failed, under failure mode
// closed; the errordetails interceptor adds its retry hint.
var errUnavailable = reason.Error(codes.Unavailable, reason.HookUnavailable, "external hook unavailable")

// defaultDenial is the message of a break that gives none.
const defaultDenial = "denied by policy"

// maxCachedHeaderBytes bounds the response headers of a decision the cache
// keeps, so that the cache's memory is bounded by its entries.
const maxCachedHeaderBytes = 8 << 10

// UnaryServerInterceptor asks client about every call of the methods it
// is given (WithMethods; default all) and does what it answers: go on
// (with the request it gives, if it gives one), or answer the call itself.
// Every error the client returns is a failure of the hook, answered by the
// failure mode (WithFailOpen). The answers' headers are added to REST
// answers through callinfo.HTTP, which the gateway must share, and to gRPC
// answers as header metadata.
func UnaryServerInterceptor(client Client, opts ...Option) grpc.UnaryServerInterceptor {
	return newInterceptor(client, opts...).intercept
}

func newInterceptor(client Client, opts ...Option) *interceptor {
	h := &interceptor{client: client, o: defaultOptions}
	for _, opt := range opts {
		opt(&h.o)
	}
	h.breaker = gobreaker.NewTwoStepCircuitBreaker[Decision](gobreaker.Settings{
		Name:        "hook",
		MaxRequests: 1,
		Timeout:     h.o.breakFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= h.o.breakAfter },
		// A hook call cut short by its caller is neither a failure nor a
		// success of the hook: excluded, it leaves the counts as they
		// were (IsSuccessful would count it a success, hiding the
		// failures around it).
		IsExcluded: func(err error) bool { return errors.As(err, new(callerGone)) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			if h.o.log != nil {
				h.o.log.Warn("external hook circuit breaker changed state", "from", from.String(), "to", to.String())
			}
		},
	})
	if h.o.cacheEntries > 0 {
		// lru.New fails only for a size below 1.
		h.cache, _ = lru.New[cacheKey, cachedDecision](h.o.cacheEntries)
	}
	return h
}

type interceptor struct {
	client  Client
	o       options
	breaker *gobreaker.TwoStepCircuitBreaker[Decision]
	cache   *lru.Cache[cacheKey, cachedDecision] // nil: no cache
}

// cacheKey is the SHA-256 of what a cached decision is reused for: the
// caller, the method, the allowlisted headers and the body the hook saw.
// A digest rather than those bytes, so an entry's size does not depend on
// the request's.
type cacheKey [sha256.Size]byte

type cachedDecision struct {
	d     Decision
	until time.Time
}

// callerGone is a hook call cut short by the call's own deadline or its
// client going away: no failure of the hook, so the breaker ignores it.
type callerGone struct{ err error }

func (e callerGone) Error() string { return e.err.Error() }
func (e callerGone) Unwrap() error { return e.err }

func (h *interceptor) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if h.o.methods != nil && !h.o.methods[info.FullMethod] {
		return handler(ctx, req)
	}
	msg, _ := req.(proto.Message)
	ci := callinfo.FromContext(ctx)
	web := callinfo.HTTPFromContext(ctx)
	var caller string
	if ci != nil {
		caller = ci.CallerID
	}
	headers := h.headers(ctx, web)

	var key cacheKey
	cacheable := false
	if h.cache != nil {
		key, cacheable = h.key(caller, info.FullMethod, headers, msg)
	}
	if cacheable {
		if e, ok := h.cache.Get(key); ok {
			if h.o.now().Before(e.until) {
				h.outcome(ci, ResultCached, "")
				return h.decided(ctx, req, handler, e.d, ci, web)
			}
			h.cache.Remove(key)
		}
	}

	d, replacement, err := h.ask(ctx, h.call(ctx, info.FullMethod, msg, ci, web, headers), msg)
	if gone, ok := errors.AsType[callerGone](err); ok {
		h.outcome(ci, ResultError, gone.Error())
		if errors.Is(ctx.Err(), context.Canceled) {
			return nil, reason.OutcomeCanceled.Err()
		}
		return nil, reason.OutcomeDeadline.Err()
	}
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		h.outcome(ci, ResultSkipped, "")
		return h.failed(ctx, req, handler)
	}
	if err != nil {
		h.outcome(ci, ResultError, err.Error())
		return h.failed(ctx, req, handler)
	}
	if replacement != nil {
		req = replacement
	}
	// What an answer carries is bounded before it is kept or used: the
	// cache's memory is then bounded by its entries.
	d.Message, d.Reason = reason.Clip(d.Message), reason.Clip(d.Reason)
	if cacheable && d.CacheFor > 0 && d.Body == nil && headerBytes(d.ResponseHeaders) <= maxCachedHeaderBytes {
		h.cache.Add(key, cachedDecision{d: d, until: h.o.now().Add(d.CacheFor)})
	}
	if d.Break != 0 {
		h.outcome(ci, ResultBreak, "")
	} else {
		h.outcome(ci, ResultContinue, "")
	}
	return h.decided(ctx, req, handler, d, ci, web)
}

// headers returns the allowlisted request headers the call carries, by
// name; nil when it carries none.
func (h *interceptor) headers(ctx context.Context, web *callinfo.HTTP) map[string][]string {
	if len(h.o.headers) == 0 {
		return nil
	}
	var out map[string][]string
	for i, name := range h.o.headers {
		var vs []string
		if web != nil {
			vs = web.Header[h.o.canonical[i]]
		} else {
			vs = metadata.ValueFromIncomingContext(ctx, name)
		}
		if len(vs) == 0 {
			continue
		}
		if out == nil {
			out = make(map[string][]string, len(h.o.headers))
		}
		out[name] = vs
	}
	return out
}

// call describes the call for the hook.
func (h *interceptor) call(ctx context.Context, method string, msg proto.Message, ci *callinfo.Info, web *callinfo.HTTP, headers map[string][]string) *Call {
	c := &Call{Method: method, Headers: headers}
	if ci != nil {
		c.ID, c.CallerID = ci.RequestID, ci.CallerID
	}
	if web != nil {
		c.Transport, c.HTTPMethod, c.Path, c.Authority = TransportREST, web.Method, web.Target, web.Host
	} else {
		c.Transport, c.HTTPMethod, c.Path = TransportGRPC, http.MethodPost, method
		if a := metadata.ValueFromIncomingContext(ctx, ":authority"); len(a) > 0 {
			c.Authority = a[0]
		}
	}
	if h.o.sendBody {
		c.Body = msg
	}
	return c
}

// maxKeyBuffer is the largest buffer keyBuffers keeps.
const maxKeyBuffer = 64 << 10

// keyBuffers hold the bytes a cache key is the digest of.
var keyBuffers = sync.Pool{New: func() any { return new([]byte) }}

// key returns the cache key of a call, as docs/hook.md#caching says: its
// caller, method, allowlisted headers and, when the hook is sent it, its
// body (not its transport nor request id). It
// reports false for a call whose message does not marshal, which is never
// cached.
func (h *interceptor) key(caller, method string, headers map[string][]string, msg proto.Message) (cacheKey, bool) {
	bp := keyBuffers.Get().(*[]byte)
	b := (*bp)[:0]
	// Each part with its length first, so no two keys' parts run together.
	part := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	part(caller)
	part(method)
	for _, name := range h.o.headers {
		vs := headers[name]
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			part(v)
		}
	}
	ok := true
	if h.o.sendBody && msg != nil {
		var err error
		b, err = proto.MarshalOptions{Deterministic: true}.MarshalAppend(b, msg)
		ok = err == nil
	}
	k := cacheKey(sha256.Sum256(b))
	// A buffer that grew with a large body is left to the collector.
	if cap(b) <= maxKeyBuffer {
		*bp = b
		keyBuffers.Put(bp)
	}
	return k, ok
}

// The breaker counts the hook's own failures (transport errors, 5xx, an
// answer outside the protocol, hook.timeout), never a call its caller cut
// short (its deadline, sooner than hook.timeout, or its going away): that
// one is excluded (callerGone). That is not enough while the breaker is
// half-open: its one trial call then decides for every caller, and a
// trial that its caller cuts short decides nothing, so callers with short
// deadlines would take the trial again and again, against a hook slower
// than their deadlines but well within hook.timeout, while every other
// call is skipped (answered 503 under failure mode closed, let through
// unchecked under open) for as long as they keep coming. So the trial call
// runs on its own (probe), to an end of the hook's: its answer, its
// failure, or hook.timeout; its caller waits for it within its own
// deadline only.

// ask calls the hook through the breaker, under the hook's timeout, and
// returns its decision and the request it puts in place of msg, if any.
// An answer whose replacement is not a valid request is a failure. Its
// errors are gobreaker's when the breaker refuses the call, callerGone when
// the call's own deadline or client ended it first, and the hook's
// failure otherwise.
func (h *interceptor) ask(ctx context.Context, call *Call, msg proto.Message) (Decision, proto.Message, error) {
	done, err := h.breaker.Allow()
	if err != nil {
		return Decision{}, nil, err
	}
	if h.breaker.State() == gobreaker.StateHalfOpen {
		return h.probe(ctx, call, msg, done)
	}
	d, replacement, err := h.check(ctx, call, msg)
	done(err)
	return d, replacement, err
}

// hookAnswer is what one hook call gave.
type hookAnswer struct {
	d           Decision
	replacement proto.Message
	err         error
}

// probe makes the half-open breaker's trial call: under hook.timeout alone,
// detached from the caller's deadline and cancellation (its context's
// values, the span among them, kept), in a goroutine of its own, which
// tells the breaker how it ended. The caller waits for it as long as its
// own context lasts: past that, it is answered callerGone and the trial
// goes on without it. The breaker lets one trial run at a time, so at most
// one such goroutine outlives its caller, for at most hook.timeout.
func (h *interceptor) probe(ctx context.Context, call *Call, msg proto.Message, done func(error)) (Decision, proto.Message, error) {
	answered := make(chan hookAnswer, 1)
	go func() {
		d, replacement, err := h.check(context.WithoutCancel(ctx), call, msg)
		done(err)
		answered <- hookAnswer{d, replacement, err}
	}()
	select {
	case a := <-answered:
		return a.d, a.replacement, a.err
	case <-ctx.Done():
		return Decision{}, nil, callerGone{ctx.Err()}
	}
}

// check calls the hook once, under hook.timeout from ctx, and returns its
// decision and replacement request, or its failure: callerGone when ctx
// had ended, which cut it short (a probe's ctx, detached from its caller,
// never ends).
func (h *interceptor) check(ctx context.Context, call *Call, msg proto.Message) (d Decision, replacement proto.Message, err error) {
	hctx, cancel := context.WithTimeout(ctx, h.o.timeout)
	defer cancel()
	if h.o.tracer != nil {
		var span trace.Span
		hctx, span = h.o.tracer.Start(hctx, "sheba.hook", trace.WithSpanKind(trace.SpanKindClient))
		defer func() {
			if err != nil {
				span.SetStatus(otelcodes.Error, err.Error())
			} else {
				span.SetAttributes(attribute.Int("sheba.hook.break", d.Break))
			}
			span.End()
		}()
	}
	start := time.Now()
	d, err = h.client.Check(hctx, call)
	h.o.metrics.observe(time.Since(start).Seconds())
	if err != nil {
		if ctx.Err() != nil {
			return d, nil, callerGone{err}
		}
		return d, nil, err
	}
	if d.Body != nil && d.Break == 0 {
		if replacement, err = h.replace(ctx, msg, d.Body); err != nil {
			return d, nil, fmt.Errorf("hook's replacement request: %w", err)
		}
	}
	return d, replacement, nil
}

// replace returns body as a request of msg's type, checked by the
// validator.
func (h *interceptor) replace(ctx context.Context, msg proto.Message, body []byte) (proto.Message, error) {
	if msg == nil || h.o.validate == nil {
		return nil, errors.New("this call's request cannot be replaced")
	}
	r := msg.ProtoReflect().New().Interface()
	if err := protojson.Unmarshal(body, r); err != nil {
		return nil, err
	}
	if err := h.o.validate(ctx, r); err != nil {
		return nil, errors.New(status.Convert(err).Message())
	}
	return r, nil
}

// decided does what d says: add its headers, then answer the break or call
// the handler. A break's retry-after (whole seconds) becomes the answer's
// retry hint, which sheba sends as Retry-After and RetryInfo alike.
func (h *interceptor) decided(ctx context.Context, req any, handler grpc.UnaryHandler, d Decision, ci *callinfo.Info, web *callinfo.HTTP) (any, error) {
	addHeaders(ctx, web, d.ResponseHeaders)
	if d.Break != 0 {
		if ra := d.ResponseHeaders[retryafter.Key]; len(ra) > 0 && ci != nil {
			if n, err := strconv.Atoi(ra[0]); err == nil && n > 0 {
				ci.RetryAfter = time.Duration(n) * time.Second
			}
		}
		return nil, breakError(d)
	}
	return handler(ctx, req)
}

// failed answers a call whose hook failed, by the failure mode.
func (h *interceptor) failed(ctx context.Context, req any, handler grpc.UnaryHandler) (any, error) {
	if h.o.failOpen {
		return handler(ctx, req)
	}
	return nil, errUnavailable
}

// outcome records the hook's result for the log line and the metrics.
func (h *interceptor) outcome(ci *callinfo.Info, result, errText string) {
	if ci != nil {
		// The hook's own text is quoted in a log line: bounded.
		ci.Hook, ci.HookError = result, reason.Clip(reason.ValidUTF8(errText))
	}
	h.o.metrics.count(result)
}

// breakError is the answer of a break: the code of its status, HOOK_DENIED
// with the hook's reason, and on REST the status itself.
func breakError(d Decision) error {
	msg := d.Message
	if msg == "" {
		msg = defaultDenial
	}
	var md map[string]string
	if d.Reason != "" {
		md = map[string]string{reason.HookReasonKey: d.Reason}
	}
	// Message and Reason were clipped where the decision was taken.
	return reason.ErrorFor(codeOf(d.Break), reason.HookDenied, msg, md, d.Break)
}

// codeOf returns the gRPC code of a break's HTTP status (docs/hook.md).
func codeOf(httpStatus int) codes.Code {
	switch httpStatus {
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusConflict:
		return codes.Aborted
	case http.StatusTooManyRequests:
		return codes.ResourceExhausted
	}
	if httpStatus >= 500 {
		return codes.Unavailable
	}
	return codes.FailedPrecondition
}

// addHeaders adds hs to the call's answer: to the REST answer's headers,
// or as gRPC header metadata. Names a transport reserves, and values that
// cannot be sent as metadata, are left out.
func addHeaders(ctx context.Context, web *callinfo.HTTP, hs map[string][]string) {
	if len(hs) == 0 {
		return
	}
	var md metadata.MD
	for name, vs := range hs {
		if reserved(name) || !metadataName(name) {
			continue
		}
		for _, v := range vs {
			if !callinfo.MetadataText(v) {
				continue
			}
			if web != nil {
				if web.ResponseHeader == nil {
					web.ResponseHeader = make(http.Header, len(hs))
				}
				web.ResponseHeader.Add(name, v)
				continue
			}
			if md == nil {
				md = make(metadata.MD, len(hs))
			}
			md[name] = append(md[name], v)
		}
	}
	if md != nil {
		// Fails only outside a server call (a direct test call).
		_ = grpc.SetHeader(ctx, md)
	}
}

// reserved reports whether a header name belongs to the transports or to
// sheba's own answers: the hook may not set it.
func reserved(name string) bool {
	if name == "" || name[0] == ':' || strings.HasPrefix(name, "grpc-") || strings.HasSuffix(name, "-bin") ||
		// Connect's own (the browser protocols), as grpc- is gRPC's.
		strings.HasPrefix(name, "connect-") ||
		// CORS is the operator's to grant (http.cors), not the hook's.
		strings.HasPrefix(name, "access-control-") {
		return true
	}
	switch name {
	case "content-type", "content-length", "content-encoding", "transfer-encoding", "connection",
		"keep-alive", "te", "trailer", "upgrade", "vary", "date", "www-authenticate",
		// What sheba says of the call: its id, its limits, a replay.
		requestlog.RequestIDKey, ratelimit.StateKey, ratelimit.PolicyKey, idempotency.ReplayedKey,
		// sheba sets it on every 429 and 503 (a break's becomes its hint).
		retryafter.Key:
		return true
	}
	return false
}

// metadataName reports whether name is a valid gRPC metadata key, which
// is a valid HTTP field name too: lowercase letters, digits, '-', '_' and
// '.'. grpc-go sends whatever it is given, and a name outside these fails
// the whole answer at the client.
func metadataName(name string) bool {
	for i := range len(name) {
		b := name[i]
		if !('a' <= b && b <= 'z' || '0' <= b && b <= '9' || b == '-' || b == '_' || b == '.') {
			return false
		}
	}
	return name != ""
}

// headerBytes is about the memory hs takes: its text, and a string and
// slice header for each name and value.
func headerBytes(hs map[string][]string) int {
	n := 0
	for k, vs := range hs {
		n += len(k) + 48
		for _, v := range vs {
			n += len(v) + 16
		}
	}
	return n
}
