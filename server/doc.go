// Package server implements the sheba.v1 services: the handlers, and
// nothing of the transports that carry them.
//
// A handler gets a request that holds to the constraints of its proto
// (the buf.validate rules of proto/sheba/v1, which the chain's validation
// link enforces before any handler runs: interceptors/protovalidate),
// checks what no constraint can say (a page token, a webhook URL's target:
// InvalidArgument with google.rpc.BadRequest field violations), makes one
// store call, and maps the store's sentinel errors to status codes through
// the one error table, in interceptors/reason (errors.go says what was not
// found). Services.Register puts them on any grpc.ServiceRegistrar; internal/app
// registers them on the grpc.Server and on the REST gateway's in-process
// channel (server/gateway), both behind the same interceptor chain. The
// package imports no net/http, no gateway and no driver, so a handler is
// tested with a store and no listener.
//
// The API, its input rules and its errors are described in docs/api.md.
package server
