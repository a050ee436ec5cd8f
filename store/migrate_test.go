package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
)

// schemaTables are the tables the migrations make.
var schemaTables = []string{"accounts", "subscriptions", "idempotency_keys", "webhook_endpoints", "webhook_events", "webhook_deliveries", "webhook_leases"}

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

// migrationNames are the embedded migrations, in order. Versions may skip
// a number (none does today).
var migrationNames = []struct {
	version uint
	name    string
}{
	{1, "init"}, {2, "idempotency"}, {3, "webhooks"}, {4, "webhook_secret_rotation"}, {5, "webhook_fanout"},
	{6, "webhook_leases"}, {7, "webhook_retention_indexes"}, {8, "subscription_version"}, {9, "event_positions"},
}

// statesApplied returns the status of the migrations with the first n
// applied.
func statesApplied(n int) []store.MigrationState {
	states := make([]store.MigrationState, len(migrationNames))
	for i, m := range migrationNames {
		states[i] = store.MigrationState{Version: m.version, Name: m.name, Applied: i < n}
	}
	return states
}

// appliedBefore returns how many migrations come before version.
func appliedBefore(tb testing.TB, version uint) int {
	tb.Helper()
	for i, m := range migrationNames {
		if m.version == version {
			return i
		}
	}
	tb.Fatalf("no migration %d in migrationNames", version)
	return 0
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
		if err := store.MigrateDown(ctx, dbURL, false); err != nil {
			t.Fatalf("MigrateDown to %d applied: %v", n, err)
		}
		checkStatus(t, dbURL, statesApplied(n))
	}
	if n := tablesExisting(t, dbURL); n != 0 {
		t.Errorf("after every MigrateDown: got %d of the tables %v, want none", n, schemaTables)
	}
	if err := store.MigrateDown(ctx, dbURL, false); err == nil {
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

// publicTables returns the tables of the database's public schema.
func publicTables(tb testing.TB, dbURL string) map[string]bool {
	tb.Helper()
	conn, err := pgx.Connect(tb.Context(), dbURL)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(tb.Context()))
	rows, _ := conn.Query(tb.Context(), `SELECT tablename FROM pg_tables WHERE schemaname = 'public'`)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		tb.Fatal(err)
	}
	tables := map[string]bool{}
	for _, n := range names {
		tables[n] = true
	}
	return tables
}

// TestDroppedTablesMatchTheSQL reverts every migration and checks that the
// tables MigrateDown reads from its down step, and so guards, are the ones
// it drops.
func TestDroppedTablesMatchTheSQL(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewDatabase(t)
	for i := len(migrationNames) - 1; i >= 0; i-- {
		v, want := migrationNames[i].version, migrationNames[i].name
		name, guarded, err := store.DroppedTables(v)
		if err != nil {
			t.Fatalf("DroppedTables(%d): %v", v, err)
		}
		if name != want {
			t.Errorf("DroppedTables(%d): got name %q, want %q", v, name, want)
		}
		before := publicTables(t, dbURL)
		if err := store.MigrateDown(t.Context(), dbURL, false); err != nil {
			t.Fatalf("MigrateDown of %d on empty tables: %v", v, err)
		}
		after := publicTables(t, dbURL)
		var dropped []string
		for table := range before {
			if !after[table] {
				dropped = append(dropped, table)
			}
		}
		if diff := cmp.Diff(dropped, guarded, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
			t.Errorf("migration %d %s: tables dropped (-dropped +guarded):\n%s", v, name, diff)
		}
	}
}

// TestMigrateDownKeepsRows checks that MigrateDown refuses to revert a
// migration that would drop rows, naming the tables that hold them and
// changing nothing, unless forced; a step that drops only empty tables
// goes ahead.
func TestMigrateDownKeepsRows(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewDatabase(t)
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	s := store.New(pool)
	a := mustCreateAccount(t, s, "kept")
	if _, err := s.CreateSubscription(ctx, a.ID, "pro"); err != nil {
		t.Fatal(err)
	}
	ep, err := s.CreateWebhookEndpoint(ctx, store.WebhookEndpoint{
		Owner: "test", URL: "https://example.com/hook", EventTypes: []string{"account.created"}, Secret: "whsec_x",
	}, 1)
	if err != nil {
		t.Fatal(err)
	}
	// An attempt in flight.
	if _, ok, err := s.AcquireWebhookLease(ctx, ep.ID, 1, time.Hour); !ok || err != nil {
		t.Fatalf("AcquireWebhookLease: got %v, %v, want a lease", ok, err)
	}
	pool.Close()

	for _, step := range []struct {
		version uint
		want    []store.TableRows // nil: reverted without force
	}{
		// Columns and an index dropped, no table.
		{9, nil},
		// A column dropped, no table.
		{8, nil},
		// Indexes dropped, no table.
		{7, nil},
		{6, []store.TableRows{{Table: "webhook_leases", Rows: 1}}},
		// Columns dropped, no table.
		{5, nil},
		{4, nil},
		{3, []store.TableRows{{Table: "webhook_endpoints", Rows: 1}}},
		{2, nil},
		{1, []store.TableRows{{Table: "subscriptions", Rows: 1}, {Table: "accounts", Rows: 1}}},
	} {
		applied := appliedBefore(t, step.version) + 1
		err := store.MigrateDown(ctx, dbURL, false)
		if step.want == nil {
			if err != nil {
				t.Fatalf("MigrateDown of %d: %v", step.version, err)
			}
			checkStatus(t, dbURL, statesApplied(applied-1))
			continue
		}
		var full *store.TablesNotEmptyError
		if !errors.As(err, &full) {
			t.Fatalf("MigrateDown of %d: got %v, want a TablesNotEmptyError", step.version, err)
		}
		if diff := cmp.Diff(&store.TablesNotEmptyError{Version: step.version, Name: migrationNames[applied-1].name, Tables: step.want}, full); diff != "" {
			t.Errorf("MigrateDown of %d (-want +got):\n%s", step.version, diff)
		}
		t.Logf("MigrateDown of %d: %v", step.version, err)
		checkStatus(t, dbURL, statesApplied(applied))

		if err := store.MigrateDown(ctx, dbURL, true); err != nil {
			t.Fatalf("MigrateDown of %d forced: %v", step.version, err)
		}
		checkStatus(t, dbURL, statesApplied(applied-1))
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
	last := int(migrationNames[len(migrationNames)-1].version)
	if !errors.As(err, &dirty) || dirty.Version != last {
		t.Errorf("MigrationStatus on a dirty database: got %v, want migrate.ErrDirty at version %d", err, last)
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
