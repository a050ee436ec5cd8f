package callinfo

import (
	"context"
	"net/http"
	"time"

	"google.golang.org/grpc/metadata"
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

	// header is the response metadata left with SetHeader; values backs
	// the values of its first keys.
	header metadata.MD
	values [4]string
}

// SetHeader leaves key: value in the response metadata of the call, which
// the outermost step sends once, when the call is done (Header). Every
// grpc.SetHeader on a grpc.Server copies the whole header set so far, so
// the steps of the chain leave theirs here rather than set it one by one.
// A handler that sends its headers itself (grpc.SendHeader) must know that
// these follow only if it sets none before the call is done.
func (i *Info) SetHeader(key, value string) {
	if i.header == nil {
		i.header = make(metadata.MD, len(i.values))
	}
	if n := i.header.Len(); n < len(i.values) && i.header[key] == nil {
		// A value of its own in the Info's memory (its capacity ends there,
		// so an append elsewhere copies it).
		i.values[n] = value
		i.header[key] = i.values[n : n+1 : n+1]
		return
	}
	i.header[key] = append(i.header[key], value)
}

// Header returns the response metadata left with SetHeader, nil if none.
func (i *Info) Header() metadata.MD { return i.header }

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

// Context is a context that carries an Info. It is context.WithValue's
// valueCtx with the Info inline, so that a call pays one allocation for
// both; the outermost step may embed it in a context of its own to carry
// more in that allocation.
type Context struct {
	context.Context
	Info Info
}

// Value returns the Info for FromContext, else the parent's value of k.
func (c *Context) Value(k any) any {
	if k == (key{}) {
		return &c.Info
	}
	return c.Context.Value(k)
}

// New returns ctx carrying a new Info with the given request id, and that
// Info, for the outermost interceptor.
func New(ctx context.Context, requestID string) (context.Context, *Info) {
	c := &Context{Context: ctx, Info: Info{RequestID: requestID}}
	return c, &c.Info
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
