package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/golang-migrate/migrate/v4"
	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
)

// schemaTables are the tables the migrations make.
var schemaTables = []string{"accounts", "subscriptions", "idempotency_keys", "webhook_endpoints", "webhook_events", "webhook_deliveries"}

// tablesExisting returns how many of schemaTables are in the database.
func tablesExisting(tb testing.TB, dbURL string) int {
	tb.Helper()
	conn, err := pgx.Connect(tb.Context(), dbURL)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(tb.Context()))
	var n int
	err = conn.QueryRow(tb.Context(),
		`SELECT count(to_regclass(t)) FROM unnest($1::text[]) AS t`, schemaTables).Scan(&n)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// checkStatus fails the test unless MigrationStatus reports want.
func checkStatus(tb testing.TB, dbURL string, want []store.MigrationState) {
	tb.Helper()
	got, err := store.MigrationStatus(tb.Context(), dbURL)
	if err != nil {
		tb.Fatalf("MigrationStatus: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		tb.Errorf("MigrationStatus mismatch (-want +got):\n%s", diff)
	}
}

// migrationNames are the embedded migrations, in order.
var migrationNames = []string{"init", "idempotency", "webhooks"}

// statesApplied returns the status of the migrations with the first n
// applied.
func statesApplied(n int) []store.MigrationState {
	states := make([]store.MigrationState, len(migrationNames))
	for i, name := range migrationNames {
		states[i] = store.MigrationState{Version: uint(i + 1), Name: name, Applied: i < n}
	}
	return states
}

func TestMigrations(t *testing.T) {
	t.Parallel()
	// The test database comes migrated from the template.
	dbURL := storetest.NewDatabase(t)
	ctx := t.Context()
	all := len(migrationNames)

	checkStatus(t, dbURL, statesApplied(all))
	if err := store.MigrateUp(ctx, dbURL); err != nil {
		t.Errorf("MigrateUp with nothing to do: got %v, want nil", err)
	}

	// Each MigrateDown reverts one step.
	for n := all - 1; n >= 0; n-- {
		if err := store.MigrateDown(ctx, dbURL); err != nil {
			t.Fatalf("MigrateDown to %d applied: %v", n, err)
		}
		checkStatus(t, dbURL, statesApplied(n))
	}
	if n := tablesExisting(t, dbURL); n != 0 {
		t.Errorf("after every MigrateDown: got %d of the tables %v, want none", n, schemaTables)
	}
	if err := store.MigrateDown(ctx, dbURL); err == nil {
		t.Error("MigrateDown with nothing applied: got nil, want an error")
	}

	if err := store.MigrateUp(ctx, dbURL); err != nil {
		t.Fatalf("MigrateUp: %v", err)
	}
	checkStatus(t, dbURL, statesApplied(all))
	if n := tablesExisting(t, dbURL); n != len(schemaTables) {
		t.Fatalf("after MigrateUp: got %d of the tables %v, want all", n, schemaTables)
	}

	// The re-created schema works.
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := store.New(pool)
	a := mustCreateAccount(t, s, "ada")
	if _, err := s.CreateSubscription(ctx, a.ID, "pro"); err != nil {
		t.Errorf("CreateSubscription on the re-migrated schema: %v", err)
	}
}

func TestMigrationStatusDirty(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewDatabase(t)
	conn, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(t.Context()))
	// What golang-migrate leaves when a migration fails halfway.
	if _, err := conn.Exec(t.Context(), `UPDATE schema_migrations SET dirty = true`); err != nil {
		t.Fatal(err)
	}

	_, err = store.MigrationStatus(t.Context(), dbURL)
	var dirty migrate.ErrDirty
	if !errors.As(err, &dirty) || dirty.Version != len(migrationNames) {
		t.Errorf("MigrationStatus on a dirty database: got %v, want migrate.ErrDirty at version %d", err, len(migrationNames))
	}
	if err := store.MigrateUp(t.Context(), dbURL); err == nil {
		t.Error("MigrateUp on a dirty database: got nil, want an error")
	}
}

func TestMigrateBadURL(t *testing.T) {
	t.Parallel()
	for _, test := range []struct {
		name string
		url  string
	}{
		{name: "not a url", url: "::not a url"},
		{name: "nothing listens", url: "postgres://postgres@127.0.0.1:1/x?sslmode=disable&connect_timeout=5"},
	} {
		t.Run(test.name, func(t *testing.T) {
			if err := store.MigrateUp(t.Context(), test.url); err == nil {
				t.Errorf("MigrateUp(%q): got nil, want an error", test.url)
			}
			if _, err := store.MigrationStatus(t.Context(), test.url); err == nil {
				t.Errorf("MigrationStatus(%q): got nil, want an error", test.url)
			}
		})
	}
}
