-- Undo 000001_init.up.sql. Dropping the tables drops their indexes.
-- Subscriptions go first: they reference accounts.
BEGIN;

DROP TABLE subscriptions;
DROP TABLE accounts;

COMMIT;
