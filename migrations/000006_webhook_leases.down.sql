-- Undo 000006_webhook_leases.up.sql. Its rows are leases of attempts in
-- flight, not data: once deliveries have stopped (and a dead replica's
-- leases expired), the table is empty. The older version caps attempts per
-- replica.
BEGIN;

DROP TABLE webhook_leases;

COMMIT;
