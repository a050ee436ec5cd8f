package webhooks

import (
	"context"
	"time"

	"github.com/riverqueue/river"
)

// retentionArgs is the job of deleting the events whose deliveries have
// all ended, once they are older than Options.Retention, and the leases of
// replicas that died (expired, they hold no slot any more).
type retentionArgs struct{}

func (retentionArgs) Kind() string { return "sheba_webhook_retention" }

// retentionJob is the periodic job of retention: River's leader, one
// replica of the cluster, enqueues it every RetentionInterval, and at most
// one a period (River's unique jobs: a second at least) goes in should two
// replicas lead at once.
func (r *Runner) retentionJob() *river.PeriodicJob {
	every := r.o.RetentionInterval
	unique := river.UniqueOpts{ByPeriod: max(every, time.Second)}
	return river.NewPeriodicJob(river.PeriodicInterval(every), func() (river.JobArgs, *river.InsertOpts) {
		return retentionArgs{}, &river.InsertOpts{Queue: queue, UniqueOpts: unique}
	}, &river.PeriodicJobOpts{ID: retentionArgs{}.Kind()})
}

// Each run of the retention job deletes at most retentionBatches batches
// of retentionBatch events, one statement a batch; the next run goes on.
const (
	retentionBatch   = 1000
	retentionBatches = 100
)

// retentionWorker works retention jobs.
type retentionWorker struct {
	river.WorkerDefaults[retentionArgs]
	r *Runner
}

func (w *retentionWorker) Work(ctx context.Context, _ *river.Job[retentionArgs]) error {
	if _, err := w.r.store.DeleteExpiredWebhookLeases(ctx); err != nil {
		return err
	}
	before := time.Now().Add(-w.r.o.Retention)
	for range retentionBatches {
		n, err := w.r.store.DeleteEndedWebhookEvents(ctx, before, retentionBatch)
		if err != nil || n < retentionBatch {
			return err
		}
	}
	return nil
}
