package store

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Canceler knows the open connections of the pools given it with
// WithCanceler, so that CancelAll can cancel whatever they run: the last
// resort of a shutdown out of time. A pool's Close waits for every
// connection in use, and a query whose context never ends (one that writes
// an outcome however the caller fares, say) holds it as long as Postgres
// makes it wait. Its zero value is ready; it is safe for concurrent use.
type Canceler struct {
	mu    sync.Mutex
	conns map[*pgconn.PgConn]struct{}
}

// WithCanceler makes c know the connections of the pool, from when they
// are opened to when they are closed. It costs nothing per query.
func WithCanceler(c *Canceler) PoolOption {
	return func(o *poolSetup) {
		cfg := o.cfg
		afterConnect, beforeClose := cfg.AfterConnect, cfg.BeforeClose
		cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			if afterConnect != nil {
				if err := afterConnect(ctx, conn); err != nil {
					return err
				}
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.conns == nil {
				c.conns = map[*pgconn.PgConn]struct{}{}
			}
			c.conns[conn.PgConn()] = struct{}{}
			return nil
		}
		cfg.BeforeClose = func(conn *pgx.Conn) {
			c.mu.Lock()
			delete(c.conns, conn.PgConn())
			c.mu.Unlock()
			if beforeClose != nil {
				beforeClose(conn)
			}
		}
	}
}

// CancelAll sends a cancel request (as a query's ended context does) for
// every open connection at once, and waits until Postgres has them all or
// ctx is done. It returns how many it sent. A statement running on one
// fails with query_canceled, which its caller reads as the end of its
// context; a connection that runs nothing ignores the request, so there is
// no need to know which are in use (one that starts a statement just then
// may see that one cancelled: CancelAll is for the end).
func (c *Canceler) CancelAll(ctx context.Context) int {
	c.mu.Lock()
	conns := make([]*pgconn.PgConn, 0, len(c.conns))
	for conn := range c.conns {
		conns = append(conns, conn)
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, conn := range conns {
		// Safe beside the query running on conn: it dials a connection of
		// its own, with the key conn got when it opened.
		wg.Go(func() { _ = conn.CancelRequest(ctx) })
	}
	wg.Wait()
	return len(conns)
}
