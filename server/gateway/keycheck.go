package gateway

import (
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	"github.com/shebasvc/sheba/interceptors/apikey"
	"github.com/shebasvc/sheba/interceptors/callinfo"
)

// The key before the body (docs/api.md#authentication): a request to a
// method that needs a key, without a valid one, goes on without its body,
// before any guard reads, limits or waits for it. The chain then refuses
// the call, as it refuses any call without a key: the same 401, the same
// reason, counted and logged once, as on gRPC. So no byte a caller without
// a key sends is decompressed or decoded, and such a caller takes no body
// slot: however many and however slow, those callers cannot delay a keyed
// one. The chain's auth interceptor stays the authority; this check only
// decides whether the body is worth reading, and how.
//
// A call to a public method without a valid key is read, but within its
// own small bound (publicBodyBytes, as sent and once decompressed) and
// without a body slot (publicbody.go): the slots are for the keyed bodies,
// so that callers without a key never hold one a keyed body needs.

// Authenticator is the API-key check the gateway asks before it reads a
// body: the chain's own (*apikey.Authenticator), so that both judge a
// request alike.
type Authenticator interface {
	// Known reports whether apiKey or authorization (the first values of
	// the x-api-key and authorization metadata) hold a configured key. It
	// counts no rejection: the chain does.
	Known(apiKey, authorization string) bool
	// Public reports whether a full gRPC method needs no key.
	Public(method string) bool
}

// keyChecker is an Authenticator whose verdict the chain takes as it is
// (*apikey.Authenticator): a REST call's key is then hashed once, here. The
// chain stays the authority on every other call (gRPC, the browser
// protocols), and on a REST call whose key is not known here, which it
// refuses or, for a public method, lets through.
type keyChecker interface {
	Check(apiKey, authorization string) apikey.Verdict
}

// checkKey checks the key of the REST call rc, once, and reports whether it
// is known.
func checkKey(authn Authenticator, rc *restCall) bool {
	if !rc.checked {
		rc.checked = true
		apiKey, authorization := credential(rc.header, apiKeyHeaders[:]), credential(rc.header, authorizationHeaders[:])
		if c, ok := authn.(keyChecker); ok {
			rc.verdict = c.Check(apiKey, authorization)
		} else if authn.Known(apiKey, authorization) {
			// Known here, found again by the chain.
			rc.known = true
		}
	}
	return rc.known || rc.verdict.Known()
}

// The headers the credentials' metadata is made of: the header of that
// name, and its Grpc-Metadata- form (headers.go). Canonical once here, so
// that reading them allocates nothing.
var (
	apiKeyHeaders        = [2]string{http.CanonicalHeaderKey(apikey.MetadataKey), http.CanonicalHeaderKey(runtime.MetadataHeaderPrefix + apikey.MetadataKey)}
	authorizationHeaders = [2]string{http.CanonicalHeaderKey(apikey.AuthorizationKey), http.CanonicalHeaderKey(runtime.MetadataHeaderPrefix + apikey.AuthorizationKey)}
)

// keyBeforeBody returns r without its body if the call it makes needs a key
// and brings no valid one, and r as it is otherwise; public is true when
// the call is to a public method without a valid key, whose body is then
// read within publicBodyBytes and without a slot (readPublicBody). A
// request without a body is left alone: there is nothing to guard, and
// nothing to look up.
//
// The key of a request to a route is checked even without a body, so that
// the chain takes the caller found here (checkKey) rather than hash the key
// again; one without a route and without a body is left to the mux (404 or
// 405), and its key is never hashed.
func keyBeforeBody(authn Authenticator, rc *restCall, r *http.Request) (_ *http.Request, public bool) {
	if rc.route != nil {
		checkKey(authn, rc)
	}
	if bodiless(r) {
		return r, false
	}
	if checkKey(authn, rc) {
		return r, false
	}
	// A path no route has is answered 404 or 405 by the mux, with or
	// without its body.
	if rc.route != nil && rc.route.public {
		return r, true
	}
	return withoutBody(r), false
}

// credential returns the first value of the metadata made of headers
// (incomingMetadata): from the plain header, else from its Grpc-Metadata-
// form, skipping the values that gRPC metadata cannot carry, which are
// dropped. (The metadata puts the plain header's values first too; the
// Authorization header's Grpc-Metadata- form is grpc-gateway's to pass, and
// comes after the plain one as well.)
func credential(h http.Header, names []string) string {
	for _, name := range names {
		for _, v := range h[name] {
			if callinfo.MetadataText(v) {
				return v
			}
		}
	}
	return ""
}

// bodiless reports whether r has no body to read.
func bodiless(r *http.Request) bool {
	return r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody
}

// withoutBody returns a copy of r with no body, which is never read. The
// server's own request keeps the body, which net/http discards or closes
// once the answer is written. A Content-Encoding goes too, for there is
// nothing to decompress, and a Content-Type the gateway cannot decode, as
// unsupportedType drops it, so the answer's type comes from Accept alone.
func withoutBody(r *http.Request) *http.Request {
	r = r.WithContext(r.Context())
	r.Body, r.ContentLength = http.NoBody, 0
	r.Header.Del("Content-Length")
	r.Header.Del("Content-Encoding")
	if !supportedContentType(r.Header.Get("Content-Type")) {
		r.Header.Del("Content-Type")
	}
	return r
}
