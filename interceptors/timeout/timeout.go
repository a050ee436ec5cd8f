package timeout

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"

	"github.com/shebasvc/sheba/interceptors/reason"
)

// errExpired answers a call past its deadline as every step does (the
// error table of package reason).
var errExpired = reason.OutcomeDeadline.Err()

// UnaryServerInterceptor runs each call under a deadline of at most max from
// now; a client deadline that is sooner stays. A call that ends after its
// deadline, with an error or with an answer, answers DeadlineExceeded.
func UnaryServerInterceptor(max time.Duration) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		deadline, ok := ctx.Deadline()
		if !ok || time.Until(deadline) > max {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, max)
			defer cancel()
			deadline, _ = ctx.Deadline()
		}
		resp, err := handler(ctx, req)
		// A late answer is not sent: the client has given up on it (gRPC
		// itself answers DeadlineExceeded then) and REST must say the
		// same. The clock is read as well as ctx.Err(), which turns only
		// when the context's timer has fired.
		if errors.Is(ctx.Err(), context.DeadlineExceeded) || !time.Now().Before(deadline) {
			return nil, errExpired
		}
		return resp, err
	}
}
