// Package store reads and writes sheba's data in Postgres.
//
// It is the only package that speaks SQL. It uses the pgx v5 native API over a
// *pgxpool.Pool, with hand-written SQL next to the method that runs it and one
// file per table. Methods return the sentinels ErrNotFound, ErrConflict and
// ErrUnavailable for the outcomes callers act on, and context.Canceled or
// context.DeadlineExceeded when the context ended (a driver timeout
// included); every error comes back wrapped with the operation and its key,
// and all the rest is to be logged and answered as an internal error. No
// caller needs to know the driver's errors.
//
// InTx runs several methods in one transaction, for changes that must
// commit together: the transaction rides in the context, so every method
// called with that context joins it, and TxFromContext hands it to other
// packages that write in it. WithLazyTx makes a transaction that its
// owner ends but that begins only at the first store call with its
// context, so that what runs before (a wait for a password hash slot)
// holds no connection.
//
// Ids are uuids passed and returned as text. Callers validate their syntax
// first; a malformed id that reaches the database still reads as ErrNotFound.
// Times are returned in UTC.
//
// The schema lives in package migrations and is applied by MigrateUp.
package store
