// Package gateway is the REST side of sheba: grpc-gateway's mux over an
// in-process Channel to the services, the HTTP guards in front of it, and
// the operator endpoints beside it.
//
// REST calls must not bypass the interceptor chain, so the gateway does not
// call the handlers directly (grpc-gateway's Register…HandlerServer would):
// it calls them over a Channel, a grpc.ClientConnInterface on which the
// services are registered behind the same chain as on the grpc.Server.
//
// Before the gateway, in this order: Vary: Accept, the choice between JSON
// and CBOR by Accept (accept.go), 415 for a body of another type, 413 for a
// body over the limit (bodylimit.go), request decompression and answer
// compression (codec/httpcompress). Errors are google.rpc.Status bodies
// with the HTTP status of their code, 405 carries Allow (routes.go), and
// retry-after and x-request-id metadata become plain headers (headers.go).
// See docs/api.md.
package gateway
