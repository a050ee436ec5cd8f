// Package reason names why sheba refused a call: the google.rpc.ErrorInfo
// (domain "sheba", an UPPER_SNAKE reason) that every error the service
// decides carries, exactly once, on gRPC and REST alike
// (docs/api.md#errors). The constants of reason.go are the one list of
// reasons; docs/api.md#reasons explains each.
//
// The error table (table.go) says what a client sees of the outcomes that
// several steps meet: the store's sentinels, a deadline, a canceled call,
// the database down, anything unexpected, and a reused idempotency key.
// For each it gives the code, the reason, the fixed message, whether the
// operator sees a log line, and the REST status where it is not the code's.
// The handlers (server), the interceptors (idempotency, timeout, the
// recovery of the chain) and the REST gateway answer through it.
//
// A step that knows more than its code says builds its status with Status
// at the source, once where the message is fixed (a package-level variable
// or at construction). Every other error gets the reason of its code from
// Complete, which one central step applies to every error: the errordetails
// interceptor for the chain, and the REST gateway's error handler for what
// it answers itself. Complete also adds google.rpc.RetryInfo to the errors a
// client should retry later (RESOURCE_EXHAUSTED, UNAVAILABLE) and makes the
// message valid UTF-8, so that no text from a request can make an error
// unanswerable.
//
// It is a small shared package, like callinfo and retryafter, so that the
// interceptors, the handlers and the gateway can name reasons without
// importing one another; it imports store only for its sentinel errors
// (store imports nothing of sheba's but its migrations). It is not an
// interceptor and returns no codes.
package reason
