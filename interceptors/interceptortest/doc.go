// Package interceptortest runs an interceptor in a real grpc.Server on
// 127.0.0.1, for the end-to-end test of each interceptor package, and
// checks what interceptors answer (the RateLimit fields).
package interceptortest
