-- Undo 000005_webhook_fanout.up.sql. Drain the queue first
-- (docs/operations.md#migrations): deliveries waiting for a place and events
-- not yet fanned out have no job the older version would work.
BEGIN;

DROP INDEX webhook_deliveries_waiting;
ALTER TABLE webhook_deliveries DROP COLUMN queued;
ALTER TABLE webhook_events DROP COLUMN endpoints_snapshot;
ALTER TABLE webhook_endpoints
    DROP COLUMN probe_until,
    DROP COLUMN parked_until,
    DROP COLUMN failures,
    DROP COLUMN queued,
    DROP COLUMN created_xid;

COMMIT;
