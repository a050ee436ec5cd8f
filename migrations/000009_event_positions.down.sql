-- Undo 000009_event_positions.up.sql. The older version deletes an event
-- that no endpoint receives only when it fans it out; those already fanned
-- out stay until the retention job deletes them.
BEGIN;

DROP INDEX webhook_events_position;
ALTER TABLE webhook_events
    DROP COLUMN seq,
    DROP COLUMN created_xid;

COMMIT;
