// Package retryafter tells a rejected caller when to try again.
//
// Every interceptor that rejects a call for load (the rate limits, the
// concurrency limit) says when to retry with Set. In the chain, Set leaves
// the wait in the call's callinfo.Info, and the errordetails interceptor
// writes it once, as "retry-after" response metadata and as the error's
// google.rpc.RetryInfo, in whole seconds and at least 1; the REST gateway
// turns the metadata into a Retry-After header. It is its own package so
// that those interceptors need not import one another.
//
// It is not an interceptor and returns no codes.
package retryafter

import (
	"context"
	"math"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/shebasvc/sheba/interceptors/callinfo"
)

// Key is the response metadata key.
const Key = "retry-after"

// Seconds returns wait rounded up to whole seconds, at least 1.
func Seconds(wait time.Duration) int64 {
	return max(1, int64(math.Ceil(wait.Seconds())))
}

// Set tells the caller of the call in ctx to retry after wait, rounded up
// to whole seconds and at least 1. Within the chain (a callinfo.Info in
// ctx) it records wait for the errordetails interceptor; outside it, it sets
// the retry-after response metadata itself.
func Set(ctx context.Context, wait time.Duration) {
	if ci := callinfo.FromContext(ctx); ci != nil {
		ci.RetryAfter = wait
		return
	}
	// Fails only outside a server call (a direct test call); the rejection
	// stands without the hint.
	_ = grpc.SetHeader(ctx, metadata.Pairs(Key, strconv.FormatInt(Seconds(wait), 10)))
}
