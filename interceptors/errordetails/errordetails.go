package errordetails

import (
	"context"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/interceptors/callinfo"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/interceptors/retryafter"
)

// defaultRetry is the hint of a retryable error whose maker gave none.
const defaultRetry = time.Second

// UnaryServerInterceptor completes the error of every call it wraps.
func UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ci := callinfo.FromContext(ctx)
		if ci == nil {
			// Whoever makes the Info sends its headers, those the steps
			// inside left there included (callinfo.NewContext). It fails only
			// outside a server call (a direct test call); the RetryInfo still
			// says the delay.
			ci = &callinfo.Info{}
			ctx = callinfo.NewContext(ctx, ci)
			defer func() {
				if md := ci.Header(); len(md) > 0 {
					_ = grpc.SendHeader(ctx, md)
				}
			}()
		}
		resp, err := handler(ctx, req)
		if err == nil {
			return resp, nil
		}
		var retry time.Duration
		if reason.Retryable(status.Code(err)) {
			wait := ci.RetryAfter
			if wait <= 0 {
				wait = defaultRetry
			}
			// Whole seconds, the unit of the header, in both.
			retry = time.Duration(retryafter.Seconds(wait)) * time.Second
		}
		se := reason.CompleteError(err, "", retry)
		if delay := se.Delay(); delay > 0 {
			ci.SetHeader(retryafter.Key, strconv.FormatInt(retryafter.Seconds(delay), 10))
		}
		return nil, se
	}
}
