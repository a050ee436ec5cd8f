-- The first schema: accounts and their subscriptions.
--
-- Ids are uuids made by the database (gen_random_uuid is built in since
-- Postgres 13), so no caller can pick or guess them. Times are timestamptz:
-- absolute instants, whatever the session time zone.
BEGIN;

CREATE TABLE accounts (
    id            uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    -- UNIQUE makes the database the judge of a taken username, so two
    -- concurrent sign-ups cannot both win.
    username      text        NOT NULL UNIQUE,
    password_hash text        NOT NULL,
    create_time   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE subscriptions (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    account_id  uuid        NOT NULL REFERENCES accounts (id),
    plan        text        NOT NULL,
    status      text        NOT NULL CHECK (status IN ('active', 'canceled')),
    create_time timestamptz NOT NULL DEFAULT now(),
    cancel_time timestamptz,
    -- A canceled subscription always says when, and an active one never does.
    CHECK ((status = 'canceled') = (cancel_time IS NOT NULL))
);

-- At most one active subscription per account. The store inserts without
-- looking first and turns the unique violation into a conflict: a
-- check-then-insert would let two concurrent requests both pass the check.
-- It is also the index that finds an account's active subscription.
CREATE UNIQUE INDEX subscriptions_one_active_per_account
    ON subscriptions (account_id)
    WHERE status = 'active';

-- Every subscription of an account, canceled ones included. Postgres does not
-- index the referencing side of a foreign key by itself; without this, deleting
-- or re-keying an account would scan all subscriptions.
CREATE INDEX subscriptions_account_id ON subscriptions (account_id);

-- Listing newest first, paged by keyset on (create_time, id): the index order
-- is the listing order, so a page is a short index range scan however deep it
-- is. id breaks ties between rows created in the same transaction.
CREATE INDEX subscriptions_newest_first ON subscriptions (create_time DESC, id DESC);

-- The same listing filtered by plan: equality on the first column, then the
-- listing order.
CREATE INDEX subscriptions_plan_newest_first ON subscriptions (plan, create_time DESC, id DESC);

COMMIT;
