-- The retention job's two lookups (store.DeleteEndedWebhookEvents) through
-- indexes: without them every run reads webhook_events whole, and, with a
-- backlog, every pending delivery (store TestHotQueryPlans).
BEGIN;

-- The events older than the retention period, oldest first.
CREATE INDEX webhook_events_create_time ON webhook_events (create_time);

-- Whether an event still has a pending delivery, looked up by event: only
-- the pending ones are indexed, so the index stays as small as the backlog.
CREATE INDEX webhook_deliveries_pending_event ON webhook_deliveries (event_id) WHERE state = 'pending';

COMMIT;
