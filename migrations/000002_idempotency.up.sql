-- The outcomes of requests sent with an idempotency key (docs/api.md,
-- "Idempotency keys").
--
-- A row is written in the transaction of the change the request made, so a
-- change is never committed without its record, nor a record without its
-- change. The primary key is the key's scope: the caller (API key id), the
-- method and the key the client chose; the request that inserts a scope
-- first owns it.
BEGIN;

CREATE TABLE idempotency_keys (
    caller      text        NOT NULL,
    method      text        NOT NULL,
    key         text        NOT NULL,
    -- SHA-256 of the request message: a retry must send the same request.
    fingerprint bytea       NOT NULL,
    -- The gRPC status code of the outcome; 0 is OK.
    code        integer     NOT NULL,
    -- The response message (as a google.protobuf.Any) for code 0, else the
    -- google.rpc.Status, in protobuf binary.
    response    bytea       NOT NULL,
    create_time timestamptz NOT NULL DEFAULT now(),
    -- After it, the row is ignored and may be replaced or reaped.
    expire_time timestamptz NOT NULL,
    PRIMARY KEY (caller, method, key)
);

-- The reaper deletes expired rows in small batches, oldest first.
CREATE INDEX idempotency_keys_expire_time ON idempotency_keys (expire_time);

COMMIT;
