// Package standby runs the read-only calls on a standby (a read replica)
// while it is recent enough, and on the primary otherwise
// (docs/operations.md#reading-from-standbys).
//
// A read-only call runs on a connection to the standby (its context
// carries the connection, store.StandbyConn.Context, so the handler's
// store calls run on it) when the standby gives one within a second, its
// replay lag is at most the bound (WithMaxLag), and the caller has made no
// write on this process within that bound: what it just changed reads back
// changed. Otherwise it runs on the primary: its context is left as it
// came. A call that the standby answers NotFound runs again on the primary
// before NotFound is answered, so what was just created is found; a call
// that the standby fails (Unavailable, Internal, or its connection broke)
// runs again on the primary too, unless its deadline has passed. A write
// (Methods.Writes) is remembered for its caller when it ends, whatever its
// outcome: a write cut by its deadline may have committed. Every other
// call, and everything a write reads, runs on the primary.
//
// Each read-only call is counted once in sheba_db_reads_total (Metrics) by
// where it finally ran and why: target "standby", reason "ok"; or target
// "primary" with reason "recent_write", "lag", "standby_down" (no
// connection came, or the standby failed the call) or
// "not_found_fallback" (the standby answered NotFound; whatever the
// primary then answers).
//
// It sits right before the handler, after failfast and before idempotency
// (internal/app/chain.go): a call refused above reads nothing, and a write
// is remembered once its transaction, which idempotency commits, has
// ended.
//
// The failfast interceptor, which answers Unavailable at once while the
// primary is down, is to leave the read-only methods to this one
// (WithPrimaryDown): the standby answers them meanwhile, and what is for
// the primary is answered Unavailable at once.
//
// Codes: with WithPrimaryDown, its error (Unavailable) while the primary
// is down; else none of its own: the handler's (from the primary when the
// standby did not answer).
package standby
