package webhooks

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// The queue's watchdog.
//
// River (v0.51) starts the producer of a queue, the loop that fetches its
// jobs, once, when the client starts. If the database connection breaks
// while that producer subscribes to River's notifications, as it does when
// the primary stops while sheba starts, River takes the "conn closed" for
// its own shutdown: the producer stays stopped while the client runs on,
// and this replica works no job until it restarts
// (docs/operations.md#postgres-cluster). River has no option or hook that
// restarts it, so the runner watches its queue: when a job has been due
// for StallAfter and no job ran on this replica in that time, its producer
// is not fetching, and the runner replaces it (River's Queues().Remove,
// then Add). A healthy producer with a free slot fetches a due job within
// PollInterval; one whose slots are all busy is working jobs.

// activity is when the jobs of this replica last started or ended, and how
// many run now.
type activity struct {
	running atomic.Int64
	last    atomic.Int64 // unix nanoseconds
}

func (a *activity) touch() { a.last.Store(time.Now().UnixNano()) }

// idleSince reports whether no job ran on this replica since t.
func (a *activity) idleSince(t time.Time) bool {
	return a.running.Load() == 0 && a.last.Load() < t.UnixNano()
}

// middleware records the start and end of every job.
func (a *activity) middleware() rivertype.WorkerMiddleware {
	return river.WorkerMiddlewareFunc(func(ctx context.Context, _ *rivertype.JobRow, work func(context.Context) error) error {
		a.running.Add(1)
		a.touch()
		defer func() {
			a.running.Add(-1)
			a.touch()
		}()
		return work(ctx)
	})
}

// watchQueue checks the queue every StallAfter/2 until ctx is done, and
// replaces its producer when it stalled.
func (r *Runner) watchQueue(ctx context.Context) {
	r.activity.touch()
	t := time.NewTicker(r.o.StallAfter / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		due, err := r.stalledSince(ctx)
		if err != nil || due.IsZero() {
			continue
		}
		r.o.Log.WarnContext(ctx, "webhook queue stalled: a job is due and none ran here; restarting its producer",
			"due_for", time.Since(due).Round(time.Millisecond).String())
		if err := r.restartProducer(ctx); err != nil {
			r.o.Log.WarnContext(ctx, "webhook queue: producer not restarted; trying again", "error", err)
			continue
		}
		r.m.queueRestarts.Inc()
		r.activity.touch()
	}
}

// stalledSince returns when the oldest due job of the queue became due, if
// that was more than StallAfter ago and no job ran here since; else zero.
func (r *Runner) stalledSince(ctx context.Context) (time.Time, error) {
	since := time.Now().Add(-r.o.StallAfter)
	if !r.activity.idleSince(since) {
		return time.Time{}, nil
	}
	list, err := r.river.JobList(ctx, river.NewJobListParams().
		Queues(queue).
		States(rivertype.JobStateAvailable).
		OrderBy(river.JobListOrderByScheduledAt, river.SortOrderAsc).
		First(1))
	if err != nil || len(list.Jobs) == 0 || !list.Jobs[0].ScheduledAt.Before(since) {
		return time.Time{}, err
	}
	// A job may have started while the list was read.
	if !r.activity.idleSince(since) {
		return time.Time{}, nil
	}
	return list.Jobs[0].ScheduledAt, nil
}

// restartProducer replaces the queue's producer with a new one, which
// subscribes to River's notifications and fetches again.
func (r *Runner) restartProducer(ctx context.Context) error {
	var missing *river.QueueNotFoundError
	if err := r.river.Queues().Remove(ctx, queue); err != nil && !errors.As(err, &missing) {
		return err
	}
	return r.river.Queues().Add(queue, r.queueConfig())
}
