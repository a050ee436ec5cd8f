package webhooks

import (
	"context"
	"fmt"

	"github.com/riverqueue/river"

	"github.com/shebasvc/sheba/store"
)

// eventArgs is the job of fanning one event out to the endpoints that
// receive it: the one record a change writes for its event, whatever the
// number of endpoints.
type eventArgs struct {
	EventID string `json:"event_id"`
}

func (eventArgs) Kind() string { return "sheba_webhook_event" }

// eventWorker works event jobs, with River's default retry policy.
type eventWorker struct {
	river.WorkerDefaults[eventArgs]
	r *Runner
}

func (w *eventWorker) Work(ctx context.Context, job *river.Job[eventArgs]) error {
	return w.r.expand(ctx, job.Args.EventID)
}

// expand writes the deliveries of the event, ExpandBatch endpoints at a
// time in the order of their ids, each batch with the jobs of those that
// get a place in River's queue in one transaction of its own. The change
// that made the event has committed already, and waits for none of it.
//
// A run cut short (a crash, a failed batch) leaves its batches done; the
// retry goes through them again, and the delivery's primary key (event,
// endpoint) makes each a no-op (store.ExpandWebhookEvent): no delivery is
// lost or written twice, nor enqueued twice, even if two runs overlap (a
// job rescued while its first run still works). An event that no endpoint
// receives is kept all the same, for the event stream (webhooks/eventlog),
// and deleted with the others by the retention job.
func (r *Runner) expand(ctx context.Context, eventID string) error {
	for after := ""; ; {
		var b store.ExpandedBatch
		err := r.store.InTx(ctx, func(ctx context.Context) error {
			var err error
			if b, err = r.store.ExpandWebhookEvent(ctx, eventID, after, r.o.ExpandBatch, r.o.QueueShare); err != nil || len(b.Queued) == 0 {
				return err
			}
			jobs := make([]river.InsertManyParams, len(b.Queued))
			for i, endpointID := range b.Queued {
				jobs[i] = r.deliveryJob(endpointID, eventID)
			}
			if err := r.enqueue(ctx, jobs); err != nil {
				return fmt.Errorf("enqueue deliveries of event %q: %w", eventID, err)
			}
			return nil
		})
		switch {
		case err != nil:
			return err
		case b.Endpoints < r.o.ExpandBatch:
			return nil
		}
		after = b.Last
	}
}
