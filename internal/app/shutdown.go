package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// background is what Serve runs beside the servers.
type background struct {
	health, reaper, hooks, certs, events task
}

// task is a function running on a goroutine of its own until its context
// ends.
type task struct {
	stop context.CancelFunc // ends its context
	done <-chan struct{}    // closed when it has returned
}

// start runs run on a goroutine with a context of its own, under ctx.
func start(ctx context.Context, run func(context.Context)) task {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(ctx)
	}()
	return task{stop: cancel, done: done}
}

// waitDone waits until done is closed or ctx is done, and reports whether
// done was closed.
func waitDone(ctx context.Context, done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
	}
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// cutReserve is the end of a shutdown bound of d kept for cutting what has
// not finished: a tenth, at most a second. Closing connections and sending
// cancel requests to Postgres takes milliseconds; what is left of the
// reserve then goes to the trace flush.
func cutReserve(d time.Duration) time.Duration { return min(d/10, time.Second) }

// operatorShutdown bounds the operator port's own drain: probes and
// scrapes answer in well under a second.
const operatorShutdown = time.Second

// shutdown stops everything within shutdown.timeout, drain delay included
// (docs/operations.md#graceful-shutdown): readiness turns false and the
// webhook runner takes no more jobs; the drain delay passes; the streams
// end; both servers stop accepting and let the requests in flight finish;
// then the operator port stops, the reaper, the health checker and the
// certificate reloader stop, and the pools, the Redis client and the
// tracer's flush follow (close). Once all the bound but
// its cutReserve has passed, whatever still runs is cut: the servers close
// their connections, which ends the requests' contexts and so their
// queries, a cancel request goes to every database connection, and what
// has not returned by the end of the bound is left to the process's exit.
// The error names what was cut.
func (a *App) shutdown(bg background) error {
	s := a.cfg.Shutdown
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
	defer cancel()
	grace, cancelGrace := context.WithTimeout(ctx, s.Timeout-cutReserve(s.Timeout))
	defer cancelGrace()
	a.log.Info("shutting down", "drain_delay", s.DrainDelay.String(), "timeout", s.Timeout.String())
	a.health.Shutdown()
	bg.hooks.stop()
	bg.reaper.stop()

	// Load balancers see the failing readiness before the listeners close.
	select {
	case <-time.After(s.DrainDelay):
	case <-grace.Done():
	}
	a.health.EndWatches()
	// Reflection and event streams (and any other) do not watch the
	// health server: they are ended here, with UNAVAILABLE (event streams
	// resume on another replica), every unary call still running to its
	// end. The hub stops with them.
	a.streams.End()
	bg.events.stop()

	var cut []string
	if !a.stopServers(grace) {
		cut = append(cut, "requests in flight")
	}
	// The operator port after the servers: probes and scrapes see the
	// service until it has stopped serving. Its answers are short: a
	// second, then it is cut, and the grace is left to what follows.
	if a.operator != nil {
		opCtx, cancelOp := context.WithTimeout(grace, operatorShutdown)
		if err := a.operator.Shutdown(opCtx); err != nil {
			_ = a.operator.Close()
			cut = append(cut, "operator requests")
		}
		cancelOp()
		a.operatorGRPC.Stop()
	}
	bg.health.stop()
	if !waitDone(grace, bg.hooks.done) {
		cut = append(cut, "webhook attempts")
	}
	// Neither holds anything but database connections, which close cuts.
	waitDone(grace, bg.reaper.done)
	waitDone(grace, bg.health.done)
	bg.certs.stop()
	waitDone(grace, bg.certs.done)
	cut = append(cut, a.closeWithin(ctx, grace)...)
	waitDone(grace, bg.events.done)
	for _, t := range []task{bg.hooks, bg.reaper, bg.health, bg.certs, bg.events} {
		waitDone(ctx, t.done)
	}
	if len(cut) > 0 {
		return fmt.Errorf("shutdown: shutdown.timeout (%v) ran out; cut: %s", s.Timeout, strings.Join(cut, ", "))
	}
	a.log.Info("shut down")
	return nil
}

// stopServers stops both servers gracefully until grace is done, then
// closes their connections. It reports whether they stopped in time.
func (a *App) stopServers(grace context.Context) bool {
	grpcDone := make(chan struct{})
	go func() {
		a.grpc.GracefulStop()
		close(grpcDone)
	}()
	err := a.http.Shutdown(grace)
	// No call is left on the browser protocols' server once the HTTP
	// server has shut down (or been closed, below).
	defer a.browser.Stop()
	if err == nil && waitDone(grace, grpcDone) {
		return true
	}
	if err != nil && grace.Err() == nil {
		// A listener that failed while serving does not close again.
		a.log.Warn("stopping the HTTP server", "error", err)
	}
	// Closing a connection ends the contexts of its requests, and so their
	// queries (cancel requests).
	a.grpc.Stop()
	_ = a.http.Close()
	<-grpcDone
	return false
}

// close releases what New opened, as closeWithin does, within
// shutdown.timeout.
func (a *App) close() {
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.Shutdown.Timeout)
	defer cancel()
	a.closeWithin(ctx, ctx)
}

// closeWithin releases what New opened, in the reverse order, until ctx is
// done: the pools, each waiting for its connections in use until grace is
// done, then cancelling what they still run; the Redis client (when no
// request is left to decide a rate limit); and the tracer, whose last
// spans leave before the process exits. It returns what it had to cut.
func (a *App) closeWithin(ctx, grace context.Context) (cut []string) {
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		var wg sync.WaitGroup
		for _, p := range []*pgxpool.Pool{a.listenPool, a.healthPool, a.hooksPool, a.pool} {
			if p != nil {
				wg.Go(p.Close)
			}
		}
		if a.standby != nil {
			wg.Go(a.standby.Close)
		}
		wg.Wait()
	}()
	if !waitDone(grace, closed) {
		a.conns.CancelAll(ctx)
		waitDone(ctx, closed)
		cut = append(cut, "database queries")
	}
	if a.hook != nil {
		if err := a.hook.Close(); err != nil {
			a.log.Warn("closing the hook's connections", "error", err.Error())
		}
	}
	// Closing its connections does not wait on the network.
	if err := a.rate.close(); err != nil {
		a.log.Warn("closing the redis client", "error", err.Error())
	}
	if err := a.flush(ctx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return append(cut, "trace flush")
		}
		a.log.Warn("flushing traces", "error", err)
	}
	return cut
}
