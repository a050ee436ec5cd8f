-- Undo 000007_webhook_retention_indexes.up.sql.
BEGIN;

DROP INDEX webhook_deliveries_pending_event;
DROP INDEX webhook_events_create_time;

COMMIT;
