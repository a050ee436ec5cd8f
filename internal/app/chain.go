package app

import (
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	pv "buf.build/go/protovalidate"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/interceptors/apikey"
	"github.com/shebasvc/sheba/interceptors/callinfo"
	"github.com/shebasvc/sheba/interceptors/concurrency"
	"github.com/shebasvc/sheba/interceptors/errordetails"
	"github.com/shebasvc/sheba/interceptors/failfast"
	"github.com/shebasvc/sheba/interceptors/idempotency"
	"github.com/shebasvc/sheba/interceptors/metrics"
	"github.com/shebasvc/sheba/interceptors/protovalidate"
	"github.com/shebasvc/sheba/interceptors/ratelimit"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/interceptors/requestlog"
	"github.com/shebasvc/sheba/interceptors/timeout"
	"github.com/shebasvc/sheba/internal/etag"
	"github.com/shebasvc/sheba/server"
	"github.com/shebasvc/sheba/server/gateway"
)

// chainDeps are the parts of the chain, each built once from its own config
// section.
type chainDeps struct {
	limits config.Limits
	// authn checks API keys; keyIDs are the ids of the configured keys.
	authn  *apikey.Authenticator
	keyIDs []string
	log    *slog.Logger
	// rate holds the global and per-key rate limits (nil: off).
	rate     rateLimits
	inflight concurrency.Limiter
	metrics  *metrics.Metrics
	// validator checks each request against its constraints (newValidator).
	validator pv.Validator
	// dbUp reports whether the database answers; needsDB lists the methods
	// that cannot answer without it.
	dbUp    func() bool
	needsDB map[string]bool
	// keys holds the idempotency records of the methods in idempotent,
	// kept keyTTL; nil leaves idempotency out (chain benchmarks without a
	// database).
	keys       idempotency.Store
	idempotent map[string]bool
	keyTTL     time.Duration
	// fingerprintKey is the HMAC key of the passwords in the requests'
	// fingerprints (fingerprintKey); nil: one of this process.
	fingerprintKey []byte
	// hook is the external hook's link (nil: no hook).
	hook grpc.UnaryServerInterceptor
	// standby runs the read-only methods on a standby (nil: no
	// database.read_url).
	standby grpc.UnaryServerInterceptor
	// extra run after every link above, right before the handler
	// (WithUnaryInterceptor).
	extra []grpc.UnaryServerInterceptor
}

// unaryChain builds the one interceptor chain of every business call. The
// grpc.Server and the gateway's in-process channel both use it, so every
// rule holds on REST exactly as on gRPC. Tracing is not in it: the tracing
// stats handler (gRPC) and the gateway's server spans (REST) wrap the whole chain. Order,
// outermost first:
//
//   - request id + log: outermost, so the one log line sees the final code.
//   - error details: every error below gets its ErrorInfo and, on 429 and
//     503, its RetryInfo and retry-after (docs/api.md#errors); it must see
//     recovered panics too.
//   - metrics: sees every outcome, rejections and recovered panics included.
//   - recovery: a panic anywhere inside becomes Internal "internal error",
//     logged with its stack, and is still logged and counted.
//   - auth: cheap, and gives the caller id to everything after it (in the
//     call's Info); then identify puts it on the span. On the business gRPC
//     server the tap has checked the key before the message was read
//     (tap.go), and auth takes the caller it found.
//   - bounds: a request that the gRPC codec refused unread (a message over
//     grpc.max_recv_bytes, a repeated field over its bound), or a decoded
//     one over a repeated field's bound (REST), is answered before any
//     other link, the hook or the handler handles it.
//   - global rate (anonymous callers in a bucket of their own), then per-key
//     rate: a call over its rate never takes an in-flight slot.
//   - concurrency: sheds at once what exceeds limits.max_inflight (or the
//     adaptive limit), and measures the latency of what it admits.
//   - timeout: so only the handler's time, its idempotency transaction
//     included, counts against it.
//   - validate: the request's constraints (its proto's buf.validate rules),
//     checked before any lookup: an invalid request is 400 whether the
//     database is up or down, never reaches the hook, and takes no
//     idempotency key; a valid one costs no allocation.
//   - hook: a call rejected above never reaches the external hook, which
//     knows the caller, and its wait counts against the deadline; before
//     failfast and idempotency, so it sees every call that got this far
//     and a request it replaces is the one the idempotency key binds.
//   - failfast: while the database is down, the calls that need it
//     answer Unavailable at once rather than at their deadline (with
//     database.read_url, the read-only ones are left to the standby link,
//     which answers them from the standby, or Unavailable at once).
//   - standby (with database.read_url only): right before the handler,
//     so a call refused above takes no standby connection; a read-only
//     call runs on a standby or on the primary, and a write is
//     remembered for its caller after idempotency has committed it.
//   - idempotency (creates and cancel only): innermost, so a call rejected
//     above takes no key nor connection, and its transaction, which begins
//     at the handler's first statement and which the handler's writes
//     join, runs under the deadline: a timeout in the middle rolls back
//     the change and the key together.
func unaryChain(d chainDeps) grpc.UnaryServerInterceptor {
	links := chainLinks(d)
	interceptors := make([]grpc.UnaryServerInterceptor, len(links))
	for i, l := range links {
		interceptors[i] = l.interceptor
	}
	return chainUnary(interceptors...)
}

// link is one named interceptor of the chain.
type link struct {
	name        string
	interceptor grpc.UnaryServerInterceptor
}

// chainLinks returns the interceptors of unaryChain in order, then the
// extra ones; rate limits that are off (rate 0) are left out.
func chainLinks(d chainDeps) []link {
	m := d.metrics

	links := []link{
		{"request_log", requestlog.UnaryServerInterceptor(d.log, requestlog.WithTransport(transportOf), requestlog.WithPlannedEnds(plannedStreamEnd))},
		{"error_details", errordetails.UnaryServerInterceptor()},
		{"metrics", m.UnaryServerInterceptor()},
		{"recovery", recovery.UnaryServerInterceptor(recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
			d.log.ErrorContext(ctx, "panic in handler", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			return errInternal
		}))},
		{"auth", auth.UnaryServerInterceptor(d.authn.Authenticate)},
		{"identify", identify},
		{"bounds", bounds},
	}
	// One link for both rate limits: it tells a call the fields of the
	// tighter, once.
	var limits []ratelimit.Limit
	if d.rate.global != nil {
		limits = append(limits, ratelimit.Limit{Limiter: d.rate.global, Options: []ratelimit.Option{
			ratelimit.WithPolicyName("global"),
			ratelimit.WithOnReject(m.Rejected(metrics.ReasonRate)),
		}})
	}
	if d.rate.perKey != nil {
		limits = append(limits, ratelimit.Limit{Limiter: d.rate.perKey, Options: []ratelimit.Option{
			ratelimit.WithMessage("rate limit of this API key exceeded"),
			ratelimit.WithPolicyName("key"),
			ratelimit.WithReason(reason.KeyRateLimited),
			ratelimit.WithOnReject(m.Rejected(metrics.ReasonKeyRate)),
		}})
	}
	if len(limits) > 0 {
		links = append(links, link{"rate", ratelimit.UnaryServerInterceptor(limits...)})
	}
	links = append(links,
		link{"inflight", concurrency.UnaryServerInterceptor(d.inflight, concurrency.WithOnReject(m.Rejected(metrics.ReasonInflight)))},
		link{"timeout", timeout.UnaryServerInterceptor(d.limits.Timeout)},
		link{"validate", protovalidate.UnaryServerInterceptor(d.validator, protovalidate.WithLogger(d.log))},
	)
	if d.hook != nil {
		links = append(links, link{"hook", d.hook})
	}
	links = append(links,
		link{"failfast", failfast.UnaryServerInterceptor(d.dbUp, d.needsDB, reason.OutcomeDatabaseDown.Row().Message)},
	)
	if d.standby != nil {
		links = append(links, link{"standby", d.standby})
	}
	if d.keys != nil {
		// A change's If-Match condition is part of its request.
		keyed := idempotency.UnaryServerInterceptor(d.keys, apikey.IDFromContext,
			idempotency.WithTTL(d.keyTTL), idempotency.WithLogger(d.log), idempotency.WithFingerprintKey(d.fingerprintKey),
			idempotency.WithFingerprintMetadata(etag.MetadataKey))
		links = append(links, link{"idempotency", func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			if !d.idempotent[info.FullMethod] {
				return handler(ctx, req)
			}
			return keyed(ctx, req, info, handler)
		}})
	}
	for i, x := range d.extra {
		links = append(links, link{fmt.Sprintf("extra_%d", i), x})
	}
	return links
}

// fingerprintKey derives the HMAC key under which a password enters the
// fingerprint of an idempotent request from paging.secret, with a label of
// its own so that neither use can stand for the other. The key must be the
// same on every replica and across restarts, or the retry of a sign-up is
// refused as a reused key: paging.secret is the secret sheba already needs
// to be so, set and kept by the operator for the same reason. A key of its
// own would be one more secret to deploy for little: changing paging.secret
// fails the page tokens and the sign-up keys issued under it alike, for at
// most idempotency.ttl. It returns nil when paging.secret is empty.
func fingerprintKey(p config.Paging) ([]byte, error) {
	secret := p.Key()
	if secret == nil {
		return nil, nil
	}
	return hkdf.Key(sha256.New, secret, nil, "sheba idempotency fingerprint", 32)
}

// errInternal is the answer to a panic: that of any unexpected error.
var errInternal = reason.OutcomeInternal.Err()

// transportOf tells a REST call (over the in-process channel) from a gRPC
// one and from a browser protocol's (connect, grpc-web), and names the
// peer: the HTTP client's address, which the gateway passes as
// x-forwarded-for, or the connection's.
func transportOf(ctx context.Context) (transport, peerAddr string) {
	if gateway.IsInProcess(ctx) {
		if v := metadata.ValueFromIncomingContext(ctx, "x-forwarded-for"); len(v) > 0 {
			peerAddr = v[0]
		}
		return "rest", peerAddr
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		peerAddr = p.Addr.String()
	}
	if b := gateway.BrowserProtocol(ctx); b != "" {
		return b, peerAddr
	}
	return "grpc", peerAddr
}

// bounds answers the requests that server.CheckRequest refuses: those
// refused before they were unmarshalled, and those decoded with a repeated
// field over its bound.
func bounds(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := server.CheckRequest(req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// identify records the authenticated caller on the call's span; the
// request log and the metrics read it from the call's Info, where the
// authenticator left it.
func identify(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if id := apikey.IDFromContext(ctx); id != "" {
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.SetAttributes(attribute.String("sheba.api_key_id", id))
		}
	}
	return handler(ctx, req)
}

// chainUnary composes interceptors into one, the first outermost. It exists
// because grpc.ChainUnaryInterceptor is a grpc.ServerOption, while the
// in-process channel takes a single interceptor; composing once gives both
// the same chain.
//
// The links are built once, here, in the manner of connect-go's chain: each
// link is a grpc.UnaryHandler that calls its interceptor with the next link
// as the handler. grpc-go's own chaining instead makes a closure per link on
// every call (ten allocations for sheba's chain). What differs between calls
// (the method's info and the final handler) rides in the context, which
// is a chainCall, so a call costs one allocation however long the chain is.
func chainUnary(interceptors ...grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	n := len(interceptors)
	if n == 1 {
		return interceptors[0]
	}
	links := make([]grpc.UnaryHandler, n)
	links[n-1] = func(ctx context.Context, req any) (any, error) {
		c := callOf(ctx)
		return interceptors[n-1](ctx, req, c.info, c.handler)
	}
	for i := n - 2; i >= 1; i-- {
		interceptor, next := interceptors[i], links[i+1]
		links[i] = func(ctx context.Context, req any) (any, error) {
			return interceptor(ctx, req, callOf(ctx).info, next)
		}
	}
	first, second := interceptors[0], links[1]
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		c := &chainCall{info: info, handler: handler}
		c.Context.Context = ctx
		resp, err := first(c, req, info, second)
		// The chain made the call's Info, so it sends the headers its links
		// left there (callinfo.NewContext), all at once: SendHeader takes
		// them as they are, where each grpc.SetHeader would copy them. The
		// headers go out in a HEADERS frame of their own ahead of the
		// answer or of the status, as grpc-go sends those set with
		// SetHeader. It fails only outside a server call, or when a
		// handler sent its headers itself: none of sheba's does.
		if md := c.Info.Header(); len(md) > 0 {
			_ = grpc.SendHeader(ctx, md)
		}
		return resp, err
	}
}

// chainCall is the context of a call through a composed chain: the call's
// callinfo.Info, the timeout link's deadline context, and what the links
// need to know of the call they serve, ride in the context itself, so a call through the chain costs one
// allocation.
type chainCall struct {
	callinfo.Context
	info    *grpc.UnaryServerInfo
	handler grpc.UnaryHandler
	// deadline is the timeout link's deadline context.
	deadline timeout.Slot
}

type chainCallKey struct{}

func (c *chainCall) Value(key any) any {
	switch key {
	case chainCallKey{}:
		return c
	case timeout.SlotKey:
		return &c.deadline
	}
	return c.Context.Value(key)
}

// callOf returns the chainCall of the call in ctx. Every link runs below the
// composed interceptor that put it there, so it is always found.
func callOf(ctx context.Context) *chainCall {
	return ctx.Value(chainCallKey{}).(*chainCall)
}
