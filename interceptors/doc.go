// Package interceptors holds sheba's own gRPC server interceptors, one
// package per concern, for what go-grpc-middleware v2 lacks; each package's
// doc.go says where it sits in the chain and which codes it returns.
//
// The chain that orders them is built once, in internal/app (chain.go), and
// serves both the grpc.Server and the REST gateway's in-process channel:
// request log → error details → metrics → recovery → auth → rate limits →
// concurrency → timeout → validation (protovalidate) → hook → failfast →
// standby (reads on a standby, with database.read_url) → idempotency →
// handler. No package here
// imports another, except the small shared ones (callinfo, reason,
// retryafter) and the test helper; idempotency keeps its records through
// package store.
package interceptors
