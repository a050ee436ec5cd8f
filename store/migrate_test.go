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

// tablesExist reports whether both tables of the schema are in the database.
func tablesExist(tb testing.TB, dbURL string) bool {
	tb.Helper()
	conn, err := pgx.Connect(tb.Context(), dbURL)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(tb.Context()))
	var exist bool
	err = conn.QueryRow(tb.Context(),
		`SELECT to_regclass('accounts') IS NOT NULL AND to_regclass('subscriptions') IS NOT NULL`).Scan(&exist)
	if err != nil {
		tb.Fatal(err)
	}
	return exist
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

func TestMigrations(t *testing.T) {
	t.Parallel()
	// The test database comes migrated from the template.
	dbURL := storetest.NewDatabase(t)
	ctx := t.Context()

	all := []store.MigrationState{{Version: 1, Name: "init", Applied: true}, {Version: 3, Name: "webhooks", Applied: true}}
	checkStatus(t, dbURL, all)
	if err := store.MigrateUp(ctx, dbURL); err != nil {
		t.Errorf("MigrateUp with nothing to do: got %v, want nil", err)
	}

	if err := store.MigrateDown(ctx, dbURL); err != nil {
		t.Fatalf("MigrateDown: %v", err)
	}
	checkStatus(t, dbURL, []store.MigrationState{{Version: 1, Name: "init", Applied: true}, {Version: 3, Name: "webhooks", Applied: false}})
	if err := store.MigrateDown(ctx, dbURL); err != nil {
		t.Fatalf("MigrateDown: %v", err)
	}
	checkStatus(t, dbURL, []store.MigrationState{{Version: 1, Name: "init", Applied: false}, {Version: 3, Name: "webhooks", Applied: false}})
	if tablesExist(t, dbURL) {
		t.Error("tables exist after MigrateDown, want them gone")
	}
	if err := store.MigrateDown(ctx, dbURL); err == nil {
		t.Error("MigrateDown with nothing applied: got nil, want an error")
	}

	if err := store.MigrateUp(ctx, dbURL); err != nil {
		t.Fatalf("MigrateUp: %v", err)
	}
	checkStatus(t, dbURL, all)
	if !tablesExist(t, dbURL) {
		t.Fatal("tables missing after MigrateUp")
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
	if !errors.As(err, &dirty) || dirty.Version != 3 {
		t.Errorf("MigrationStatus on a dirty database: got %v, want migrate.ErrDirty at version 3", err)
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
