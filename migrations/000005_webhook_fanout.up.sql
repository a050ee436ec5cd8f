-- Webhook fan-out outside the change's transaction (docs/webhooks.md): the
-- change writes its event and one River job; that job's worker writes the
-- deliveries, endpoint by endpoint, later. An endpoint keeps at most a few
-- deliveries in River's queue (the others wait here), and one that keeps
-- failing is parked until a probe says it answers again.
BEGIN;

ALTER TABLE webhook_endpoints
    -- The transaction that created the endpoint: an event goes to the
    -- endpoints its change could see (pg_visible_in_snapshot), not to
    -- those created after it. Rows from before this migration count as
    -- created by it.
    ADD COLUMN created_xid  xid8        NOT NULL DEFAULT pg_current_xact_id(),
    -- Pending deliveries of the endpoint that have a job in River's queue
    -- (webhook_deliveries.queued).
    ADD COLUMN queued       integer     NOT NULL DEFAULT 0,
    -- Attempts in a row that the endpoint did not take (no answer, 5xx, 408,
    -- 429), on any replica; an answer it took resets it.
    ADD COLUMN failures     integer     NOT NULL DEFAULT 0,
    -- Set once failures reach the parking threshold: no attempt is sent
    -- before it, then one probe at a time, until one is taken.
    ADD COLUMN parked_until timestamptz,
    -- The probe in flight ends (or is given up) by then.
    ADD COLUMN probe_until  timestamptz;

-- The endpoints the change's transaction could see, as of its INSERT of the
-- event. NULL for events from before this migration, whose deliveries were
-- written with them.
ALTER TABLE webhook_events ADD COLUMN endpoints_snapshot pg_snapshot;

-- Whether the delivery has its job in River's queue; a pending one without
-- waits for a place in its endpoint's share of the queue.
ALTER TABLE webhook_deliveries ADD COLUMN queued boolean NOT NULL DEFAULT true;

-- Every delivery pending so far has its job.
UPDATE webhook_endpoints e
SET queued = (SELECT count(*) FROM webhook_deliveries d WHERE d.endpoint_id = e.id AND d.state = 'pending');

-- The deliveries of an endpoint waiting for a place, oldest event first.
CREATE INDEX webhook_deliveries_waiting ON webhook_deliveries (endpoint_id, create_time, event_id)
    WHERE state = 'pending' AND NOT queued;

COMMIT;
