package eventlog

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shebasvc/sheba/store"
)

// staleCheck is how often the listener asks whether its connection
// predates a switch of primary.
const staleCheck = time.Second

// errStale ends a listening connection that predates a switch of primary.
var errStale = errors.New("listening connection predates a switch of primary")

// listenLoop listens for the log's notifications until ctx ends, and
// wakes the hub at each. When the connection fails, or predates a switch
// of primary, it connects again after a bounded backoff; the hub's read
// after each connect (listenOnce wakes it) brings what came meanwhile, and
// the poll floor runs all along.
func (h *Hub) listenLoop(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for {
		began := time.Now()
		err := h.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		h.o.Log.WarnContext(ctx, "event notifications lost; listening again", "error", err)
		if time.Since(began) > h.o.MaxBackoff {
			backoff = 100 * time.Millisecond // it had worked a while
		}
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, h.o.MaxBackoff)
	}
}

// listenOnce takes a connection of the listen pool, listens on it until
// it fails, goes stale or ctx ends, and closes it: it never goes back to
// the pool, which would lend it still listening.
func (h *Hub) listenOnce(ctx context.Context) error {
	c, err := h.listen.Acquire(ctx)
	if err != nil {
		return err
	}
	conn := c.Conn()
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
		c.Release()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{store.EventsChannel}.Sanitize()); err != nil {
		return err
	}
	h.stats.listens.Add(1)
	// Events that committed while no one listened.
	h.kick()

	// The wait is cancelled only to stop: the pools' connections answer
	// an ended context with a cancel request to the server, too dear to
	// send every second just to look at staleness.
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if h.o.Failover != nil {
		go func() {
			t := time.NewTicker(staleCheck)
			defer t.Stop()
			for {
				select {
				case <-wctx.Done():
					return
				case <-t.C:
					if h.o.Failover.Stale(conn) {
						cancel(errStale)
						return
					}
				}
			}
		}()
	}
	for {
		if _, err := conn.WaitForNotification(wctx); err != nil {
			if cause := context.Cause(wctx); errors.Is(cause, errStale) {
				return errStale
			}
			return err
		}
		h.kick()
	}
}
