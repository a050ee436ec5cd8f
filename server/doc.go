// Package server implements the sheba.v1 services and serves them over gRPC
// and, through the grpc-gateway, over REST.
//
// Both transports reach the handlers through the same interceptor chain: the
// grpc.Server applies it to network calls, and the gateway calls the
// handlers over an in-process channel (inproc.go) that applies the same
// chain. Handlers validate their input, make one store call and map the
// store's sentinel errors to status codes in one place (errors.go).
package server
