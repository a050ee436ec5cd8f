package gateway

import (
	"context"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"

	"github.com/shebasvc/sheba/interceptors/apikey"
	"github.com/shebasvc/sheba/interceptors/callinfo"
	"github.com/shebasvc/sheba/interceptors/idempotency"
	"github.com/shebasvc/sheba/interceptors/ratelimit"
	"github.com/shebasvc/sheba/interceptors/requestlog"
	"github.com/shebasvc/sheba/interceptors/retryafter"
	"github.com/shebasvc/sheba/internal/etag"
)

// incomingHeader passes to gRPC metadata the metadata a client sends as
// Grpc-Metadata-*. The headers the chain reads by their own names (the API
// key, the request id, the idempotency key, If-Match) and the client's
// address reach the handler's metadata by the Channel (incomingMetadata), not through
// grpc-gateway: the gateway's default would also copy every standard header
// (User-Agent, Accept, Host…) as grpcgateway-* metadata, which nothing in
// sheba reads and every REST call paid for in allocations.
func incomingHeader(key string) (string, bool) {
	if len(key) > len(runtime.MetadataHeaderPrefix) && strings.EqualFold(key[:len(runtime.MetadataHeaderPrefix)], runtime.MetadataHeaderPrefix) {
		return key[len(runtime.MetadataHeaderPrefix):], true
	}
	return "", false
}

// The metadata of a REST call (docs/api.md): grpc-gateway makes metadata
// of the headers its mux is told to pass (incomingHeader), of the
// Authorization header, and of the request's Host and client address
// (x-forwarded-host, x-forwarded-for); carried to the Channel as the
// caller's outgoing metadata, it is copied again there into the handler's
// incoming metadata. For a call that brings its key in X-Api-Key that was
// 17 allocations, a fifth of BenchmarkGatewayJSON/ping's, for two values.
// So the mux is handed the request without its Host and client address,
// and with nothing to pass but the rare Grpc-Metadata-* headers, and
// grpc-gateway then makes no metadata at all; the Channel makes the
// handler's straight from the headers the request context carries
// (restCall): the same keys and values as grpc-gateway would, in a map of
// its own, with the headers' own slices (the metadata readers copy what
// they hand out). Its x-forwarded-host, which nothing reads, is left out
// unless a client sends X-Forwarded-Host (the hook is told the Host by
// callinfo.HTTP). The Authorization header and the Grpc-Timeout are left
// to grpc-gateway, which reads them whatever it is told.

// channelHeaders are the headers that the Channel makes metadata of, by
// the metadata's key: the ones the chain reads, and If-Match, which the
// handlers read (etag.go).
var channelHeaders = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{apikey.MetadataKey, requestlog.RequestIDKey, idempotency.MetadataKey, etag.MetadataKey} {
		m[k] = http.CanonicalHeaderKey(k)
	}
	return m
}()

// grpcReserved are the headers that grpc-go makes no metadata of (its
// transport's isReservedHeader), and the protocols' own.
var grpcReserved = map[string]bool{
	"content-type": true, "te": true, "grpc-message-type": true, "grpc-encoding": true, "grpc-message": true,
	"grpc-status": true, "grpc-timeout": true, "grpc-status-details-bin": true, "content-encoding": true,
	"connect-protocol-version": true, "connect-timeout-ms": true, "connect-content-encoding": true,
	"connect-accept-encoding": true, "grpc-accept-encoding": true, "accept-encoding": true, "content-length": true,
	"connection": true, "transfer-encoding": true,
}

// forwardedForKey is the metadata of the client's address.
const forwardedForKey = "x-forwarded-for"

// restCallKey is the context key of a REST call's *restCall.
type restCallKey struct{}

// restCall is the context of a REST request on its way through the
// gateway, made once when it arrives (newRESTCall): what the request was
// found to be, once, for every step after (its route, and with it its
// method's gRPC name and policy; the caller its key identifies), what the
// Channel reads of the request, and the room for the handler's context, so
// that this is the call's one allocation for all of them.
type restCall struct {
	context.Context
	header     http.Header
	remoteAddr string
	// route is the request's route, nil if the table has none; verbPath
	// is true when a route with a verb matches its path (routes.go).
	route    *route
	verbPath bool
	// checked is true once the key was checked (checkKey); verdict is
	// what that found, which the chain takes as it is (apikey.Verdict).
	checked bool
	verdict apikey.Verdict
	// known is true when an Authenticator that gives no verdict
	// (keyChecker) knew the key.
	known bool
	// taken is set by the Channel's call that takes the room below: the
	// mux makes one per request.
	taken atomic.Bool
	// call is the handler's context, and forwardedFor the value of its
	// x-forwarded-for metadata.
	call         callContext
	forwardedFor [1]string
	// requestIDHeader is the room of the answer's X-Request-Id (New).
	requestIDHeader [1]string
	// browser marks the call of a browser protocol (browserconnect.go):
	// its metadata has the Authorization header, as grpc-go makes it,
	// and not the client's address, which is its peer (peer) instead.
	browser bool
	peer    peer.Peer
	// allHeaders: a browser call's metadata has every header, as grpc-go
	// makes a call's (the hook reads its allowlisted headers there), not
	// only the chain's (Options.ShareRequest).
	allHeaders bool
	// refusedHeader is the response metadata of a stream refused at its
	// opening (refusedStream), which grpc-gateway does not pass on with
	// the error, as it does a unary call's: errorHandler writes it.
	refusedHeader metadata.MD
	// shared is the last message of a stream the Channel received for
	// the message sharedFor, whose REST encoding rewriteShared writes.
	shared    sharedMessage
	sharedFor proto.Message
}

func (c *restCall) Value(key any) any {
	if key == (restCallKey{}) {
		return c
	}
	if v, ok := c.verdict.ContextValue(key); ok {
		return v
	}
	return c.Context.Value(key)
}

// newRESTCall returns a copy of r whose context is its restCall, with its
// route looked up: the one lookup of the call.
func newRESTCall(r *http.Request, routes *routeTable) (*http.Request, *restCall) {
	c := &restCall{Context: r.Context(), header: r.Header, remoteAddr: r.RemoteAddr}
	c.route, c.verbPath = routes.find(r.Method, r.URL.Path)
	return r.WithContext(c), c
}

// restCallOf returns the restCall of a REST request's context.
func restCallOf(ctx context.Context) *restCall {
	if c, ok := ctx.(*restCall); ok {
		return c
	}
	c, _ := ctx.Value(restCallKey{}).(*restCall)
	return c
}

// forMux empties the Host and RemoteAddr of r, a request the gateway made
// (newRESTCall and after), for the mux: the Channel reads them from the
// restCall.
func forMux(r *http.Request) *http.Request {
	r.Host, r.RemoteAddr = "", ""
	return r
}

// incomingMetadata returns the handler's incoming metadata of a call made
// with ctx: the caller's outgoing metadata, copied, and when ctx is a REST
// call's, the metadata of its headers and client address, which are
// placed first (before those of Grpc-Metadata-* headers of the same name,
// as the key check reads them); and the room for the handler's context in
// the REST call, if there is one and the room is free (the first call of
// the request takes it).
func incomingMetadata(ctx context.Context) (metadata.MD, *callContext) {
	md, _ := metadata.FromOutgoingContext(ctx)
	rc, ok := ctx.Value(restCallKey{}).(*restCall)
	if !ok {
		return md, nil
	}
	var room *callContext
	if rc.taken.CompareAndSwap(false, true) {
		room = &rc.call
	}
	if md == nil {
		md = make(metadata.MD, len(channelHeaders)+1)
	}
	for key, name := range channelHeaders {
		values := metadataValues
		if key == etag.MetadataKey {
			values = ifMatchValues
		}
		if vs := values(rc.header[name]); len(vs) > 0 {
			md[key] = append(vs, md[key]...)
		}
	}
	if rc.browser {
		if vs := metadataValues(rc.header[authorizationHeaders[0]]); len(vs) > 0 {
			md[apikey.AuthorizationKey] = append(vs, md[apikey.AuthorizationKey]...)
		}
		if rc.allHeaders {
			for name, vs := range rc.header {
				key := strings.ToLower(name)
				if _, ok := md[key]; ok || grpcReserved[key] {
					continue
				}
				if vs := metadataValues(vs); len(vs) > 0 {
					md[key] = vs
				}
			}
		}
		if room != nil {
			room.peer = &rc.peer
		}
		return md, room
	}
	// As grpc-gateway: the client's address after the X-Forwarded-For
	// values a client sent, in one value.
	if ip, _, err := net.SplitHostPort(rc.remoteAddr); err == nil && callinfo.MetadataText(ip) {
		if sent := md[forwardedForKey]; len(sent) > 0 {
			ip = sent[0] + ", " + ip
		}
		if room != nil {
			rc.forwardedFor[0] = ip
			md[forwardedForKey] = rc.forwardedFor[:]
		} else {
			md[forwardedForKey] = []string{ip}
		}
	}
	return md, room
}

// metadataValues returns the values of vs that gRPC metadata can carry, as
// grpc-gateway passes them: vs itself, clipped, when it is all of them.
func metadataValues(vs []string) []string {
	if !slices.ContainsFunc(vs, func(v string) bool { return !callinfo.MetadataText(v) }) {
		return slices.Clip(vs)
	}
	var out []string
	for _, v := range vs {
		if callinfo.MetadataText(v) {
			out = append(out, v)
		}
	}
	return out
}

// plainHeaders maps the response metadata that HTTP clients know by name
// (docs/api.md) to its header: the key in canonical form, which is what
// Header.Add writes anyway (Retry-After, X-Request-Id, Idempotent-Replayed,
// Ratelimit-Policy, Ratelimit). Made once, so no answer pays for it.
var plainHeaders = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{retryafter.Key, requestlog.RequestIDKey, idempotency.ReplayedKey, ratelimit.PolicyKey, ratelimit.StateKey} {
		m[k] = http.CanonicalHeaderKey(k)
	}
	return m
}()

// retryAfterHeader is the header of the retry-after metadata, which the
// gateway also writes itself on the 429s and 503s it answers.
var retryAfterHeader = plainHeaders[retryafter.Key]

// requestIDHeader is the header of the x-request-id metadata.
var requestIDHeader = plainHeaders[requestlog.RequestIDKey]

// outgoingHeader turns the response metadata that HTTP clients know by name
// into plain headers; the rest keeps the gateway's Grpc-Metadata- prefix.
func outgoingHeader(key string) (string, bool) {
	if h, ok := plainHeaders[key]; ok {
		return h, true
	}
	return runtime.MetadataHeaderPrefix + key, true
}

// shareRequest returns r carrying its callinfo.HTTP (Options.ShareRequest).
func shareRequest(r *http.Request) *http.Request {
	ctx, _ := callinfo.WithHTTP(r.Context(), callinfo.HTTP{Method: r.Method, Target: r.URL.RequestURI(), Host: r.Host, Header: r.Header})
	return r.WithContext(ctx)
}

// addChainHeaders is the forward-response option that writes, on a
// successful answer, the headers the chain added to its callinfo.HTTP.
func addChainHeaders(ctx context.Context, w http.ResponseWriter, _ proto.Message) error {
	writeChainHeaders(ctx, w)
	return nil
}

// writeChainHeaders adds to the answer the headers the chain added to the
// call's callinfo.HTTP, if any.
func writeChainHeaders(ctx context.Context, w http.ResponseWriter) {
	h := callinfo.HTTPFromContext(ctx)
	if h == nil {
		return
	}
	for k, vs := range h.ResponseHeader {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
}
