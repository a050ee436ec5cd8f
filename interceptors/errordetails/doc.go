// Package errordetails completes every error of the chain with what a
// client of sheba can count on (docs/api.md#errors): exactly one
// google.rpc.ErrorInfo (domain "sheba"; the reason of its code when the
// step that made the error named none), a google.rpc.RetryInfo and
// retry-after response metadata on RESOURCE_EXHAUSTED and UNAVAILABLE, the
// two saying the same whole seconds, and a message that is valid UTF-8.
//
// The retry hint comes from retryafter.Set, which the rejecting step calls
// (a rate limit knows when its bucket refills); without one it is 1 second.
// This interceptor is the only writer of the retry-after metadata in the
// chain, so the header and the RetryInfo cannot disagree.
//
// It sits right inside the request log, outside everything else (recovery
// included), so that it sees every error the chain and the handlers make.
// It puts a callinfo.Info in the context when the request log has not.
//
// Codes: none of its own; it keeps the code of the error it completes.
package errordetails
