package hook

import (
	"context"
	"encoding/json"
	"time"

	"google.golang.org/protobuf/proto"
)

// The transports a call comes over, as the hook is told.
const (
	TransportREST = "rest"
	TransportGRPC = "grpc"
)

// Call is what a hook is told of one business call. The API key is never
// part of it: the caller is named by its key's id.
type Call struct {
	// ID is the call's x-request-id.
	ID string
	// Transport is TransportREST or TransportGRPC.
	Transport string
	// Method is the full gRPC method name ("/sheba.v1.PingService/Ping").
	Method string
	// CallerID is the id of the caller's API key; "" for a public method
	// called without one.
	CallerID string
	// HTTPMethod and Path are the REST request's method and path; for a
	// gRPC call, "POST" and Method.
	HTTPMethod, Path string
	// Authority is the host the client called (the Host header, or gRPC's
	// :authority).
	Authority string
	// Headers holds the request headers of the hook.headers allowlist the
	// call carries, by lowercase name.
	Headers map[string][]string
	// Body is the request message; nil when the hook is not to see it.
	Body proto.Message
}

// Decision is a hook's answer to a call.
type Decision struct {
	// Break is 0 to let the call go on; otherwise the HTTP status (400 to
	// 599) the call answers at once, without running its handler.
	Break int
	// Message and Reason explain a break: the error's message ("" for the
	// default) and the hook's own reason, put in the ErrorInfo's metadata.
	Message, Reason string
	// Body, when not nil, is the request message that replaces the call's,
	// in its JSON mapping (continue only).
	Body json.RawMessage
	// ResponseHeaders are added to the call's answer, whatever its outcome.
	ResponseHeaders map[string][]string
	// CacheFor, when positive, lets the decision be reused that long for
	// the same caller, method, headers and body (never with a Body).
	CacheFor time.Duration
}

// Client asks a hook about calls: the http protocol (NewHTTPClient) or
// Envoy's ext_authz (NewExtAuthzClient). Check returns an error for every
// failure of the hook (unreachable, too slow, an answer that is not of the
// protocol); the interceptor applies the failure mode. It must bound its
// wait by ctx. A Client is safe for concurrent use.
type Client interface {
	Check(ctx context.Context, c *Call) (Decision, error)
	// Close releases the client's connections.
	Close() error
}
