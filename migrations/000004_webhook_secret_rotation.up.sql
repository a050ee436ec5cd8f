-- Secret rotation (docs/webhooks.md#rotating-the-secret): an endpoint keeps
-- the secret its last rotation replaced, which signs beside the new one
-- until previous_expire_time.
BEGIN;

ALTER TABLE webhook_endpoints
    -- "" until the first rotation.
    ADD COLUMN previous_secret      text        NOT NULL DEFAULT '',
    -- When previous_secret stops signing; NULL until the first rotation.
    ADD COLUMN previous_expire_time timestamptz;

COMMIT;
