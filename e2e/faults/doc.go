// Package faults tests sheba with faults between it and Postgres: a link
// that resets its connections in the middle of transactions, or stalls,
// made by Toxiproxy (github.com/Shopify/toxiproxy/v2) run in the test's
// own process on 127.0.0.1. What a client sees and what the database keeps
// is checked with e2e/keyedwrites (docs/operations.md#postgres-cluster).
//
// It is a module of its own so that Toxiproxy and what it needs stay out
// of the service's go.mod; its go.mod replaces the service's module with
// this repository, so the tests run the code beside them. `make test` runs
// them under `scripts/pg.sh test`, as the service's own.
package faults
