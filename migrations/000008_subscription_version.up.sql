-- A subscription's version: 1 when it is created, one more at each change
-- (a cancel, an update of its plan). Its etag (AIP-154) is made from its id
-- and this number (store.Subscription.ETag), so it changes with every change
-- and only then, and never comes back: a plan changed from A to B and back
-- again has a third etag, not the first one.
--
-- A constant default is stored in the catalog, not written into each row
-- (Postgres 11 and later): the existing rows read as version 1 at once,
-- without a rewrite of the table.
BEGIN;

ALTER TABLE subscriptions ADD COLUMN version bigint NOT NULL DEFAULT 1;

COMMIT;
