package callinfo

import (
	"context"
	"net/http"
	"time"
	"unsafe"

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
	// text is memory for the strings of the call (Buffer, String); used
	// is how much of it they take.
	text [128]byte
	used int
}

// SetHeader leaves key: value in the response metadata of the call, which
// whoever made the Info sends once, when the call is done (Header; see
// NewContext). Every grpc.SetHeader on a grpc.Server copies the whole
// header set so far, so the steps of the chain leave theirs here rather
// than set them one by one. On gRPC, headers left here are lost once a
// handler has sent its headers itself (grpc.SendHeader): a handler of
// the chain must not.
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

// Buffer returns the unused memory of the Info for a string of the call,
// empty: append to it, then make the string with String. It saves the
// steps of the chain an allocation per string they make on every call
// (the request id, the RateLimit field).
func (i *Info) Buffer() []byte { return i.text[i.used:i.used] }

// String returns b as a string. A b that Buffer returned and that did not
// outgrow it is the Info's memory, which it then takes for good (the
// string lives as long as the Info, and Buffer no longer returns it);
// any other b is copied.
func (i *Info) String(b []byte) string {
	if len(b) > 0 && i.used+len(b) <= len(i.text) && &b[0] == &i.text[i.used] {
		i.used += len(b)
		return unsafe.String(&b[0], len(b))
	}
	return string(b)
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

// NewContext returns ctx carrying info. Whoever makes an Info sends the
// headers left in it (Header) when the call is done, with one
// grpc.SendHeader: a step that finds none in its context makes one (a
// Context, or with NewContext), and sends it; a step that finds one
// leaves its headers there.
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
