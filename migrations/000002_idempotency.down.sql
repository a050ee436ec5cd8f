-- Undo 000002_idempotency.up.sql. Dropping the table drops its index.
BEGIN;

DROP TABLE idempotency_keys;

COMMIT;
