package gateway

import (
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
)

// incomingHeader passes to gRPC metadata the headers the chain reads (the
// API key in either form, the request id, the idempotency key) unprefixed,
// and metadata a client sends as Grpc-Metadata-*. The gateway's default
// would also copy every standard header (User-Agent, Accept, Host…) as
// grpcgateway-* metadata, which nothing in sheba reads and every REST call
// paid for in allocations.
func incomingHeader(key string) (string, bool) {
	switch k := strings.ToLower(key); k {
	case "x-api-key", "x-request-id", "authorization", "idempotency-key":
		return k, true
	}
	if len(key) > len(runtime.MetadataHeaderPrefix) && strings.EqualFold(key[:len(runtime.MetadataHeaderPrefix)], runtime.MetadataHeaderPrefix) {
		return key[len(runtime.MetadataHeaderPrefix):], true
	}
	return "", false
}

// outgoingHeader turns the response metadata that HTTP clients know by name
// into plain headers; the rest keeps the gateway's Grpc-Metadata- prefix.
func outgoingHeader(key string) (string, bool) {
	switch key {
	case "retry-after":
		return "Retry-After", true
	case "x-request-id":
		return "X-Request-Id", true
	case "idempotent-replayed":
		return "Idempotent-Replayed", true
	case "ratelimit-policy":
		return "RateLimit-Policy", true
	case "ratelimit":
		return "RateLimit", true
	}
	return runtime.MetadataHeaderPrefix + key, true
}
