// Package retryafter tells a rejected caller when to try again.
//
// Every interceptor that rejects a call for load (the rate limits, the
// concurrency limit) sets the same "retry-after" response metadata, in whole
// seconds and at least 1; the REST gateway turns it into a Retry-After
// header. It is its own package so that those interceptors need not import
// one another.
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
)

// Key is the response metadata key.
const Key = "retry-after"

// Seconds returns wait rounded up to whole seconds, at least 1.
func Seconds(wait time.Duration) int64 {
	return max(1, int64(math.Ceil(wait.Seconds())))
}

// Set sets the retry-after response metadata of the call in ctx to wait,
// rounded up to whole seconds and at least 1.
func Set(ctx context.Context, wait time.Duration) {
	// Fails only outside a server call (a direct test call); the rejection
	// stands without the hint.
	_ = grpc.SetHeader(ctx, metadata.Pairs(Key, strconv.FormatInt(Seconds(wait), 10)))
}
