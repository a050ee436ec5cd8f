package standby

import (
	"context"
	"errors"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/store"
)

// Pool gives connections to a standby: a *store.Standby.
type Pool interface {
	// Acquire returns a connection to a standby with its replay lag, or
	// an error when none comes.
	Acquire(ctx context.Context) (*store.StandbyConn, error)
}

// Methods says which calls the interceptor routes, by full method name
// (the method table's policies: read_only; database and not read_only).
type Methods struct {
	// ReadOnly methods may run on a standby.
	ReadOnly map[string]bool
	// Writes are the methods whose calls may change the database.
	Writes map[string]bool
}

// UnaryServerInterceptor runs the calls of methods.ReadOnly on p's
// standby or on the primary, and remembers the calls of methods.Writes for
// their caller (as caller names it), as the package documentation says.
func UnaryServerInterceptor(p Pool, methods Methods, caller func(context.Context) string, opts ...Option) grpc.UnaryServerInterceptor {
	o := evaluateOptions(opts)
	r := &router{
		pool:    p,
		caller:  caller,
		writes:  newWrites(o.callers, o.maxLag, o.now),
		options: o,
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		switch {
		case methods.ReadOnly[info.FullMethod]:
			return r.read(ctx, req, handler)
		case methods.Writes[info.FullMethod]:
			defer r.writes.record(caller(ctx))
		}
		return handler(ctx, req)
	}
}

// router decides where each read-only call runs.
type router struct {
	pool   Pool
	caller func(context.Context) string
	writes *writes
	options
	// failing is whether the standby failed last time it was asked, for
	// logging the changes only.
	failing atomic.Bool
}

// read runs a read-only call on the standby or on the primary, and counts
// it once, by where it finally ran.
func (r *router) read(ctx context.Context, req any, handler grpc.UnaryHandler) (any, error) {
	if r.writes.recent(r.caller(ctx)) {
		return r.onPrimary(ctx, req, handler, ReasonRecentWrite)
	}
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		if !errors.Is(err, store.ErrStandbyDown) && ctx.Err() == nil {
			r.failed(ctx, err)
		}
		return r.onPrimary(ctx, req, handler, ReasonStandbyDown)
	}
	if conn.Lag() > r.maxLag {
		conn.Release()
		return r.onPrimary(ctx, req, handler, ReasonLag)
	}
	resp, err := handler(conn.Context(ctx), req)
	broken := conn.Release()
	switch code := status.Code(err); {
	case ctx.Err() != nil:
		// The call's time is up: the primary could not answer it either.
	case broken || code == codes.Unavailable || code == codes.Internal:
		// The handler has logged the error it answered.
		r.failed(ctx, nil)
		return r.onPrimary(ctx, req, handler, ReasonStandbyDown)
	case code == codes.NotFound:
		r.answered(ctx)
		return r.onPrimary(ctx, req, handler, ReasonNotFoundFallback)
	}
	r.answered(ctx)
	r.metrics.count(outcome{TargetStandby, ReasonOK})
	return resp, err
}

// onPrimary runs a read-only call on the primary, counted with reason;
// while the primary is down (WithPrimaryDown), it answers at once.
func (r *router) onPrimary(ctx context.Context, req any, handler grpc.UnaryHandler, reason string) (any, error) {
	r.metrics.count(outcome{TargetPrimary, reason})
	if r.primaryUp != nil && !r.primaryUp() {
		return nil, r.primaryDown
	}
	return handler(ctx, req)
}

// failed notes that the standby failed a call (with err, when no handler
// logged it), and logs it if it did not the time before.
func (r *router) failed(ctx context.Context, err error) {
	if !r.failing.Load() && r.failing.CompareAndSwap(false, true) {
		attrs := []any{}
		if err != nil {
			attrs = append(attrs, "error", err.Error())
		}
		r.log.WarnContext(ctx, "the standby fails: read-only calls run on the primary until it answers", attrs...)
	}
}

// answered notes that the standby answered a call, and logs it if it had
// failed the time before.
func (r *router) answered(ctx context.Context) {
	if r.failing.Load() && r.failing.CompareAndSwap(true, false) {
		r.log.InfoContext(ctx, "the standby answers again: read-only calls run on it")
	}
}
