-- Undo 000008_subscription_version.up.sql.
BEGIN;

ALTER TABLE subscriptions DROP COLUMN version;

COMMIT;
