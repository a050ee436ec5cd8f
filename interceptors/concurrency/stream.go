package concurrency

import (
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/interceptors/retryafter"
)

// streamRetry is when a refused stream may try again: streams are
// long-lived, and a slot frees when any of them ends.
const streamRetry = time.Second

// errTooManyStreams refuses a stream: outside the chain, no step adds the
// RetryInfo, so the error carries it itself.
var errTooManyStreams = reason.Error(codes.ResourceExhausted, reason.TooManyStreams,
	"too many open streams; retry later", &errdetails.RetryInfo{RetryDelay: durationpb.New(streamRetry)})

// StreamServerInterceptor opens a stream only if l has a free slot, which
// the stream holds until its handler returns, and refuses it with
// ResourceExhausted, reason TOO_MANY_STREAMS, RetryInfo and retry-after
// metadata of 1 s otherwise, before its handler runs. l counts open
// streams, not calls: give it a Limiter of its own (a Fixed one; a stream's
// lifetime says nothing of load, so it is released unmeasured). A refused
// stream is not counted in sheba_rejected_total, whose reasons are those of
// calls.
func StreamServerInterceptor(l Limiter) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !l.TryAcquire() {
			retryafter.Set(ss.Context(), streamRetry)
			return errTooManyStreams
		}
		defer l.Release(time.Time{}, false)
		return handler(srv, ss)
	}
}
