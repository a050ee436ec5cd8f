package timeout

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
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
		ours := false
		if now := time.Now(); !ok || deadline.Sub(now) > max {
			d := slotOf(ctx)
			d.parent, d.deadline = ctx, now.Add(max)
			defer d.stop()
			ctx, deadline, ours = d, d.deadline, true
		}
		resp, err := handler(ctx, req)
		// A late answer is not sent: the client has given up on it (gRPC
		// itself answers DeadlineExceeded then) and REST must say the
		// same. The clock is read as well as ctx.Err(), which turns only
		// when the context's timer has fired; under a deadline of ours,
		// which is the sooner, the clock alone says it (and ctx.Err()
		// would read it again).
		if !time.Now().Before(deadline) || !ours && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, errExpired
		}
		return resp, err
	}
}

// deadlineContext is context.WithDeadline(parent, deadline), made only when
// something waits on it (Done) or asks it past its deadline or its end.
// Until then it is the parent with a deadline to tell. A call that never
// waits (a ping, a call answered from memory) then costs one allocation and
// no timer, where context.WithDeadline costs four and a timer set and
// stopped (BenchmarkChain: the timeout link was a fifth of the chain's
// allocations and a tenth of its time); one that waits costs one more
// allocation than context.WithDeadline alone.
type deadlineContext struct {
	parent   context.Context
	deadline time.Time

	// made says timed and cancel are set, and never change again.
	made    atomic.Bool
	stopped atomic.Bool
	mu      sync.Mutex
	timed   context.Context
	cancel  context.CancelFunc
}

func (c *deadlineContext) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *deadlineContext) Done() <-chan struct{} { return c.make().Done() }

func (c *deadlineContext) Err() error {
	if c.made.Load() {
		return c.timed.Err()
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if c.stopped.Load() || !time.Now().Before(c.deadline) {
		// Ended: as the context.WithDeadline would be.
		return c.make().Err()
	}
	return nil
}

func (c *deadlineContext) Value(key any) any {
	if c.made.Load() {
		// So that context.Cause and the contexts made from this one find
		// the cancellation of the deadline.
		return c.timed.Value(key)
	}
	return c.parent.Value(key)
}

// make returns the context.WithDeadline this context stands for, made on
// first use; once the call is done (stop), one already cancelled.
func (c *deadlineContext) make() context.Context {
	if c.made.Load() {
		return c.timed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.made.Load() {
		c.timed, c.cancel = context.WithDeadline(c.parent, c.deadline)
		if c.stopped.Load() {
			c.cancel()
		}
		c.made.Store(true)
	}
	return c.timed
}

// stop ends the context when the call is done, as the cancel of a
// context.WithDeadline would.
func (c *deadlineContext) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped.Store(true)
	if c.made.Load() {
		c.cancel()
	}
}

// Slot is the memory of the deadline context of one call, for a context
// made for the call to carry (Value(SlotKey) returns a *Slot): the
// interceptor then makes its deadline context there rather than in an
// allocation of its own. sheba's chain carries one in the context it makes
// for every call.
type Slot struct {
	d    deadlineContext
	used bool
}

type slotKey struct{}

// SlotKey is the key under which a context carries a *Slot.
var SlotKey any = slotKey{}

// slotOf returns the deadline context of the Slot in ctx if it is unused,
// else a new one.
func slotOf(ctx context.Context) *deadlineContext {
	if s, ok := ctx.Value(SlotKey).(*Slot); ok && !s.used {
		s.used = true
		return &s.d
	}
	return new(deadlineContext)
}
