package gateway

import (
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
)

// incomingHeader passes the API key and request id headers to gRPC metadata
// unprefixed, besides the gateway's defaults (Authorization among them).
func incomingHeader(key string) (string, bool) {
	switch k := strings.ToLower(key); k {
	case "x-api-key", "x-request-id":
		return k, true
	}
	return runtime.DefaultHeaderMatcher(key)
}

// outgoingHeader turns the response metadata that HTTP clients know by name
// into plain headers; the rest keeps the gateway's Grpc-Metadata- prefix.
func outgoingHeader(key string) (string, bool) {
	switch key {
	case "retry-after":
		return "Retry-After", true
	case "x-request-id":
		return "X-Request-Id", true
	case "ratelimit-policy":
		return "RateLimit-Policy", true
	case "ratelimit":
		return "RateLimit", true
	}
	return runtime.MetadataHeaderPrefix + key, true
}
