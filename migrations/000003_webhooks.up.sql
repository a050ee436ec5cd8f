-- Outbound webhooks (docs/webhooks.md): the endpoints callers register, the
-- events changes announce, and where the delivery of each event to each
-- endpoint stands. The delivery jobs themselves live in River's tables
-- (river_job), which `sheba migrate up` creates beside these.
BEGIN;

CREATE TABLE webhook_endpoints (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    -- The id of the API key that created the endpoint: only it sees it.
    owner       text        NOT NULL,
    url         text        NOT NULL,
    event_types text[]      NOT NULL,
    description text        NOT NULL DEFAULT '',
    -- The signing secret, "whsec_" + base64. Kept readable: every attempt
    -- signs with it.
    secret      text        NOT NULL,
    state       text        NOT NULL DEFAULT 'enabled' CHECK (state IN ('enabled', 'disabled')),
    create_time timestamptz NOT NULL DEFAULT now()
);

-- One endpoint per URL and owner: registering the same URL twice would
-- deliver every event twice.
CREATE UNIQUE INDEX webhook_endpoints_owner_url ON webhook_endpoints (owner, url);

-- The owner's endpoints, newest first, paged by keyset on (create_time, id).
CREATE INDEX webhook_endpoints_owner_newest_first ON webhook_endpoints (owner, create_time DESC, id DESC);

-- An event: what every attempt sends, byte for byte.
CREATE TABLE webhook_events (
    id          uuid        PRIMARY KEY,
    type        text        NOT NULL,
    -- The whole request body: {"type", "timestamp", "data"}.
    body        bytea       NOT NULL,
    -- W3C traceparent of the request that caused the event, so the span of
    -- each attempt links to it; empty when that request was not traced.
    traceparent text        NOT NULL DEFAULT '',
    create_time timestamptz NOT NULL
);

-- The delivery of one event to one endpoint, kept by the delivery worker.
CREATE TABLE webhook_deliveries (
    endpoint_id       uuid        NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    event_id          uuid        NOT NULL REFERENCES webhook_events (id) ON DELETE CASCADE,
    state             text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'succeeded', 'failed')),
    -- Requests actually sent; attempts held back by throttling do not count.
    attempts          integer     NOT NULL DEFAULT 0,
    -- Attempts the adaptive throttle held back: the wait before the next
    -- look grows with them.
    holds             integer     NOT NULL DEFAULT 0,
    last_http_status  integer     NOT NULL DEFAULT 0,
    last_error        text        NOT NULL DEFAULT '',
    last_attempt_time timestamptz,
    -- NULL once the delivery has ended (succeeded or failed).
    next_attempt_time timestamptz,
    create_time       timestamptz NOT NULL,
    PRIMARY KEY (endpoint_id, event_id)
);

-- An endpoint's deliveries, newest event first, paged by keyset on
-- (create_time, event_id).
CREATE INDEX webhook_deliveries_endpoint_newest_first ON webhook_deliveries (endpoint_id, create_time DESC, event_id DESC);

-- The deliveries of an event, for the cascade from webhook_events.
CREATE INDEX webhook_deliveries_event_id ON webhook_deliveries (event_id);

-- The backlog gauge counts pending deliveries.
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (state) WHERE state = 'pending';

COMMIT;
