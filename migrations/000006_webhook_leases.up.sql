-- The per-endpoint cap on attempts in flight, shared by every replica
-- (docs/webhooks.md#protecting-a-failing-endpoint): an attempt holds one of
-- its endpoint's webhooks.per_endpoint_concurrency slots while its request
-- is in flight. A row exists only while its slot is held: the attempt
-- deletes it once its outcome is recorded, and a replica that died leaves
-- it to expire.
BEGIN;

CREATE TABLE webhook_leases (
    endpoint_id uuid        NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    -- 0 to per_endpoint_concurrency - 1: the key is what keeps two attempts
    -- out of one slot.
    slot        integer     NOT NULL CHECK (slot >= 0),
    -- Drawn by each claim, so that a release frees only its own lease, not
    -- one taken over after it expired.
    holder      uuid        NOT NULL,
    -- Past it the slot is free again, whether or not it was released.
    expire_time timestamptz NOT NULL,
    PRIMARY KEY (endpoint_id, slot)
);

COMMIT;
