// Package hook puts an operator's external service in front of every
// business call: a policy engine, a fraud check, an enricher. The hook is
// told of each call (Call) and answers a Decision: go on, go on with a
// replaced request and headers for the answer, or break with a status.
//
// It sits in the chain after auth, the rate and concurrency limits, the
// timeout and the validation of the request's constraints
// (internal/app/chain.go), so a call rejected above (an invalid request
// too) never reaches the hook, the hook knows the caller, and its wait
// counts against the call's deadline.
//
// Codes: a break answers the code of its status (400 InvalidArgument, 401
// Unauthenticated, 403 PermissionDenied, 404 NotFound, 409 Aborted, 429
// ResourceExhausted, other 4xx FailedPrecondition, 5xx Unavailable), reason
// HOOK_DENIED; a failed hook call under failure mode closed answers
// Unavailable, reason HOOK_UNAVAILABLE.
package hook
