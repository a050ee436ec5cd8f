// Package interceptortest runs an interceptor in a real grpc.Server on
// 127.0.0.1, for the end-to-end test of each interceptor package, checks
// what interceptors answer (the RateLimit fields), and opens the long-lived
// streams that shutdown must end.
package interceptortest
