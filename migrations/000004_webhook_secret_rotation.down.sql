-- Undo 000004_webhook_secret_rotation.up.sql. The secrets a rotation
-- replaced go with the columns: deliveries are signed with the current
-- secret alone from then on.
BEGIN;

ALTER TABLE webhook_endpoints
    DROP COLUMN previous_expire_time,
    DROP COLUMN previous_secret;

COMMIT;
