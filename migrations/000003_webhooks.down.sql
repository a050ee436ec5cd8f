-- Undo 000003_webhooks.up.sql. River's tables are River's: they stay.
BEGIN;

DROP TABLE webhook_deliveries;
DROP TABLE webhook_events;
DROP TABLE webhook_endpoints;

COMMIT;
