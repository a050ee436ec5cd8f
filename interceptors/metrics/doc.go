// Package metrics counts calls for Prometheus: the standard grpc_server_*
// family (as go-grpc-middleware's prometheus provider makes it, so existing
// gRPC dashboards work) and sheba's own sheba_requests_total by method, code and
// calling API key, and sheba_rejected_total by reason. The gauge of calls
// in flight belongs to the concurrency limiter that counts them; the caller
// registers it.
//
// Its one interceptor sits right inside the errordetails interceptor (itself
// right inside the request log; internal/app/chain.go) and outside recovery
// and every rejecting interceptor, so every outcome is counted once,
// rejections and recovered panics included, whichever transport the call
// came by. It reads the caller id from callinfo after the call, so a call
// rejected before authentication counts under api_key_id "none". Label
// values are bounded: methods outside the served set count as "unknown",
// and a caller id exists only for configured keys. Refused counts a call
// that the gRPC server's tap refuses before the chain (no valid API key) as
// the interceptor counts one that a link refuses.
//
// The interceptor returns no codes of its own.
package metrics
