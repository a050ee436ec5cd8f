package gateway

import (
	"context"
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/proto"

	"github.com/shebasvc/sheba/interceptors/apikey"
	"github.com/shebasvc/sheba/interceptors/callinfo"
	"github.com/shebasvc/sheba/interceptors/idempotency"
	"github.com/shebasvc/sheba/interceptors/ratelimit"
	"github.com/shebasvc/sheba/interceptors/requestlog"
	"github.com/shebasvc/sheba/interceptors/retryafter"
)

// incomingHeader passes to gRPC metadata the headers the chain reads (the
// API key in either form, the request id, the idempotency key) unprefixed,
// and metadata a client sends as Grpc-Metadata-*. The gateway's default
// would also copy every standard header (User-Agent, Accept, Host…) as
// grpcgateway-* metadata, which nothing in sheba reads and every REST call
// paid for in allocations.
//
// The names are compared without lowering the header's first: that made a
// string on every REST call.
func incomingHeader(key string) (string, bool) {
	for _, k := range plainIncoming {
		if strings.EqualFold(key, k) {
			return k, true
		}
	}
	if len(key) > len(runtime.MetadataHeaderPrefix) && strings.EqualFold(key[:len(runtime.MetadataHeaderPrefix)], runtime.MetadataHeaderPrefix) {
		return key[len(runtime.MetadataHeaderPrefix):], true
	}
	return "", false
}

// plainIncoming is the metadata the chain reads that a header of the same
// name gives.
var plainIncoming = [...]string{apikey.MetadataKey, apikey.AuthorizationKey, requestlog.RequestIDKey, idempotency.MetadataKey}

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
