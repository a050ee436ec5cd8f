// Package gateway is the REST side of sheba: grpc-gateway's mux over an
// in-process Channel to the services, the HTTP guards in front of it, and
// the operator endpoints beside it.
//
// REST calls must not bypass the interceptor chain, so the gateway does not
// call the handlers directly (grpc-gateway's Register…HandlerServer would):
// it calls them over a Channel, a grpc.ClientConnInterface on which the
// services are registered behind the same chain as on the grpc.Server.
//
// Before grpc-gateway's mux, in this order (New, in gateway.go):
//
//   - the request's route, looked up once in the route table (the method
//     table's routes, routes.go) and carried in its context with the
//     method and its policy, for every step below, which reuse it: the
//     span's name, the key check, the stream check and the call of the
//     route's own grpc-gateway handler (direct.go);
//   - the request's HTTP server span, when tracing is on (tracing.go);
//   - Vary: Accept, and the choice between JSON and CBOR by Accept
//     (accept.go);
//   - the key before the body: a request to a method that needs an API
//     key, without a valid one, goes on without its body, which no guard
//     below then reads or waits for, and the chain answers it 401
//     (keycheck.go); a key found valid here is not hashed again: the
//     chain takes the caller it identifies (apikey.Verdict), and judges
//     every other call itself;
//   - 415 for a body of a type other than JSON or CBOR (accept.go);
//   - 400 for an Idempotency-Key holding a byte that gRPC metadata cannot
//     carry, which the gateway would drop (idempotencykey.go, by the
//     interceptor's rule, idempotency.CheckHeader);
//   - for a public method's call without a valid key: its body read whole
//     within its own small bound (413 beyond), without a body slot, then
//     decompressed within that bound too (publicbody.go); the guards
//     below are for the other calls;
//   - 413 for a body declared over the limit, and a bound on what is read
//     of the others (bodylimit.go);
//   - 429 with Retry-After when no body slot frees within a second, for a
//     request with a body (bodyslots.go);
//   - request decompression (415 for another Content-Encoding, 413 past
//     the limit once decompressed, 400 for a corrupt body) and answer
//     compression (codec/httpcompress).
//
// Beside the REST routes, the same handler serves the browser protocols
// (Connect and gRPC-Web at POST /sheba.v1.<Service>/<Method>, browser.go)
// through vanguard to a grpc.Server with the chain, behind the same key
// check, public bound and body slots, their messages held to
// Options.MaxMessageBytes (grpc.max_recv_bytes) and their repeated fields
// bounded before they are unmarshalled; and, outermost, CORS for the
// configured origins
// (cors.go), so a preflight is answered before any key or limit.
//
// Errors are google.rpc.Status bodies with the HTTP status of their code,
// or of their reason where the error table of package reason gives one
// (errors.go), quoting at most reason.MaxQuoted bytes of the request
// (ETAG_MISMATCH is 412 when the request carried If-Match); a
// path no route has is 404, and a known path under another
// method 405 with Allow (routes.go); the retry-after, x-request-id,
// idempotent-replayed and RateLimit metadata become plain headers
// (headers.go), and an answer whose body is a resource with an etag gets
// its ETag header, uncompressed (etag.go). The headers the chain reads (the
// API key, the request id, the idempotency key, Grpc-Metadata-*), If-Match,
// which the handlers read, and the client's address become the
// call's incoming metadata, made by the Channel from the request rather
// than by grpc-gateway, which would make it twice (headers.go). See
// docs/api.md.
package gateway
