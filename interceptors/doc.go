// Package interceptors holds sheba's own gRPC server interceptors, one
// package per concern, for what go-grpc-middleware v2 lacks. The chain that
// orders them is built in package server (unaryChain).
package interceptors
