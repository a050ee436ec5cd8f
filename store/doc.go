// Package store reads and writes sheba's data in Postgres.
//
// It is the only package that speaks SQL. It uses the pgx v5 native API over a
// *pgxpool.Pool, with hand-written SQL next to the method that runs it and one
// file per table. Methods return the sentinels ErrNotFound and ErrConflict for
// the outcomes callers act on; every other error (a lost connection, a
// canceled context) comes back wrapped with the operation and its key, to be
// logged and answered as an internal error. Context errors stay visible to
// errors.Is.
//
// Ids are uuids passed and returned as text. Callers validate their syntax
// first; a malformed id that reaches the database still reads as ErrNotFound.
// Times are returned in UTC.
//
// The schema lives in package migrations and is applied by MigrateUp.
package store
