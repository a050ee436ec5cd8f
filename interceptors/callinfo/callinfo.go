package callinfo

import (
	"context"
	"net/http"
	"time"
)

// Info describes one call.
type Info struct {
	// RequestID is the call's x-request-id.
	RequestID string
	// CallerID is the id of the caller's API key, "" without a valid key.
	CallerID string
	// RetryAfter is when a call rejected for load may try again, as the
	// rejecting step said with retryafter.Set; 0 when none did.
	RetryAfter time.Duration
	// Hook is what the external hook decided of the call (continue,
	// break, error, cached, skipped), "" when it was not asked; HookError
	// says why a hook call failed. The request log line shows both.
	Hook, HookError string
}

// HTTP is what the REST gateway tells the chain of the HTTP request behind
// a call, and what the chain asks of its answer. Only the gateway makes
// one; the chain reads it with HTTPFromContext, and its absence tells a
// call that came over gRPC.
type HTTP struct {
	// Method, Target and Host are the request's method, target (path and
	// query, as sent) and Host header.
	Method, Target, Host string
	// Header is the request's header: read it, never change it.
	Header http.Header
	// ResponseHeader holds headers the chain adds to the answer, whatever
	// its outcome; nil until a step adds one. Steps of the chain run one
	// at a time, on the request's goroutine.
	ResponseHeader http.Header
}

type httpKey struct{}

// httpContext carries an HTTP inline, as infoContext does an Info: one
// allocation for both.
type httpContext struct {
	context.Context
	http HTTP
}

func (c *httpContext) Value(k any) any {
	if k == (httpKey{}) {
		return &c.http
	}
	return c.Context.Value(k)
}

// WithHTTP returns ctx carrying a copy of h, and that copy, which the
// chain reads and adds to.
func WithHTTP(ctx context.Context, h HTTP) (context.Context, *HTTP) {
	c := &httpContext{Context: ctx, http: h}
	return c, &c.http
}

// HTTPFromContext returns the HTTP of the REST call in ctx, or nil.
func HTTPFromContext(ctx context.Context) *HTTP {
	h, _ := ctx.Value(httpKey{}).(*HTTP)
	return h
}

type key struct{}

// infoContext carries an Info. It is context.WithValue's valueCtx with the
// Info inline, so that a call pays one allocation for both.
type infoContext struct {
	context.Context
	info Info
}

func (c *infoContext) Value(k any) any {
	if k == (key{}) {
		return &c.info
	}
	return c.Context.Value(k)
}

// New returns ctx carrying a new Info with the given request id, and that
// Info, for the outermost interceptor.
func New(ctx context.Context, requestID string) (context.Context, *Info) {
	c := &infoContext{Context: ctx, info: Info{RequestID: requestID}}
	return c, &c.info
}

// NewContext returns ctx carrying info.
func NewContext(ctx context.Context, info *Info) context.Context {
	return context.WithValue(ctx, key{}, info)
}

// FromContext returns the Info of the call in ctx, or nil.
func FromContext(ctx context.Context) *Info {
	info, _ := ctx.Value(key{}).(*Info)
	return info
}

// MetadataText reports whether v can be a gRPC metadata value as it is:
// printable ASCII (space to '~'), which grpc-gateway also requires of a
// header it passes on and net/http of a header value it writes.
func MetadataText(v string) bool {
	for i := range len(v) {
		if v[i] < ' ' || v[i] > '~' {
			return false
		}
	}
	return true
}
