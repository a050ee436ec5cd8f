package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"regexp"
	"strconv"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/shebasvc/sheba/migrations"
)

// MigrationState is one embedded migration and whether the database has it.
type MigrationState struct {
	Version uint
	Name    string
	Applied bool
}

// MigrateUp applies every embedded migration the database at databaseURL
// does not have yet, then the migrations of River's tables (the queue of the
// webhook deliveries, docs/webhooks.md). Having them all already is not an
// error.
//
// Concurrent callers are safe: golang-migrate holds a Postgres advisory lock
// while it works, and River's migrations run under one of ours. ctx bounds
// connecting; once a migration runs it is finished, and canceling ctx stops
// before the next one.
func MigrateUp(ctx context.Context, databaseURL string) error {
	err := withMigrate(ctx, databaseURL, func(m *migrate.Migrate) error {
		if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrate up: %w", err)
	}
	if err := migrateRiverUp(ctx, databaseURL); err != nil {
		return fmt.Errorf("migrate up: river: %w", err)
	}
	return nil
}

// riverMigrateLock is the advisory lock key that serializes River's
// migrations between replicas migrating at once: the first word of "sheba
// river migrate" in ASCII.
const riverMigrateLock = 0x73686562_61726976

// migrateRiverUp applies River's own migrations with River's migrator,
// each in its own transaction (some cannot share one), while a session lock
// (riverMigrateLock) keeps other replicas out. `migrate down` leaves them:
// River's tables are not part of sheba's numbered schema.
func migrateRiverUp(ctx context.Context, databaseURL string) error {
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	lock, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer lock.Release()
	if _, err := lock.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(riverMigrateLock)); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	defer lock.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(riverMigrateLock)) //nolint:errcheck // the session ends with the pool anyway
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return err
	}
	_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

// MigrateDown undoes the last applied migration, one step. It returns an
// error if no migration is applied. Unless force is true, it first counts
// the rows of the tables that step drops, and if any holds rows it changes
// nothing and returns a *TablesNotEmptyError.
func MigrateDown(ctx context.Context, databaseURL string, force bool) error {
	err := withMigrate(ctx, databaseURL, func(m *migrate.Migrate) error {
		version, dirty, err := m.Version()
		if errors.Is(err, migrate.ErrNilVersion) {
			return errors.New("no migration is applied")
		}
		// A dirty database fails in Steps, which says so.
		if err == nil && !dirty && !force {
			if err := checkDropsEmpty(ctx, databaseURL, version); err != nil {
				return err
			}
		}
		return m.Steps(-1)
	})
	if err != nil {
		return fmt.Errorf("migrate down: %w", err)
	}
	return nil
}

// TableRows is a table and how many rows it holds, up to
// maxCountedRows.
type TableRows struct {
	Table string
	Rows  int
}

// maxCountedRows is where MigrateDown stops counting the rows of a table:
// it need only know that there are some.
const maxCountedRows = 1000

// TablesNotEmptyError is MigrateDown refusing to revert a migration whose
// down step drops tables that hold rows.
type TablesNotEmptyError struct {
	Version uint
	Name    string
	Tables  []TableRows // those that hold rows, in the order they are dropped
}

func (e *TablesNotEmptyError) Error() string {
	tables := make([]string, len(e.Tables))
	for i, t := range e.Tables {
		switch {
		case t.Rows >= maxCountedRows:
			tables[i] = fmt.Sprintf("%s (%d+ rows)", t.Table, maxCountedRows)
		case t.Rows == 1:
			tables[i] = t.Table + " (1 row)"
		default:
			tables[i] = fmt.Sprintf("%s (%d rows)", t.Table, t.Rows)
		}
	}
	return fmt.Sprintf("reverting migration %d (%s) would drop tables that hold rows: %s; nothing was changed (migrate down --force drops them)",
		e.Version, e.Name, strings.Join(tables, ", "))
}

// checkDropsEmpty returns a *TablesNotEmptyError if a table that the down
// step of version drops holds rows.
func checkDropsEmpty(ctx context.Context, databaseURL string, version uint) error {
	name, tables, err := droppedTables(version)
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var full []TableRows
	for _, table := range tables {
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists); err != nil {
			return fmt.Errorf("look for table %s: %w", table, err)
		}
		if !exists {
			continue // the step's DROP says what happens then
		}
		var n int
		q := `SELECT count(*) FROM (SELECT FROM ` + pgx.Identifier{table}.Sanitize() + ` LIMIT ` + strconv.Itoa(maxCountedRows) + `) AS t`
		if err := conn.QueryRow(ctx, q).Scan(&n); err != nil {
			return fmt.Errorf("count rows of %s: %w", table, err)
		}
		if n > 0 {
			full = append(full, TableRows{Table: table, Rows: n})
		}
	}
	if len(full) > 0 {
		return &TablesNotEmptyError{Version: version, Name: name, Tables: full}
	}
	return nil
}

// dropTable finds the DROP TABLE statements of a migration, whose SQL
// sheba writes: one or more names, unqualified and unquoted, optionally
// after IF EXISTS.
var dropTable = regexp.MustCompile(`(?i)\bDROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?([a-z_][a-z0-9_]*(?:\s*,\s*[a-z_][a-z0-9_]*)*)`)

// droppedTables returns the name of migration version and the tables its
// down step drops, in order, read from the embedded SQL.
func droppedTables(version uint) (name string, tables []string, err error) {
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return "", nil, fmt.Errorf("open embedded migrations: %w", err)
	}
	defer src.Close()
	r, name, err := src.ReadDown(version)
	if err != nil {
		return "", nil, fmt.Errorf("read migration %d: %w", version, err)
	}
	defer r.Close()
	sql, err := io.ReadAll(r)
	if err != nil {
		return "", nil, fmt.Errorf("read migration %d: %w", version, err)
	}
	for line := range strings.Lines(string(sql)) {
		line, _, _ = strings.Cut(line, "--")
		for _, m := range dropTable.FindAllStringSubmatch(line, -1) {
			for t := range strings.SplitSeq(m[1], ",") {
				tables = append(tables, strings.ToLower(strings.TrimSpace(t)))
			}
		}
	}
	return name, tables, nil
}

// MigrationStatus lists every embedded migration in version order and
// whether the database at databaseURL has it. A database left dirty by a
// failed migration is reported as an error (wrapping migrate.ErrDirty): it
// needs a person to repair it.
func MigrationStatus(ctx context.Context, databaseURL string) ([]MigrationState, error) {
	var states []MigrationState
	err := withMigrate(ctx, databaseURL, func(m *migrate.Migrate) error {
		current, dirty, err := m.Version()
		applied := true
		switch {
		case errors.Is(err, migrate.ErrNilVersion):
			applied = false
		case err != nil:
			return err
		case dirty:
			return migrate.ErrDirty{Version: int(current)}
		}
		// golang-migrate records only the current version; migrations apply
		// in order, so every version up to it is applied.
		return eachMigration(func(version uint, name string) {
			states = append(states, MigrationState{
				Version: version,
				Name:    name,
				Applied: applied && version <= current,
			})
		})
	})
	if err != nil {
		return nil, fmt.Errorf("migration status: %w", err)
	}
	return states, nil
}

// withMigrate runs fn with a migrate.Migrate over the embedded migrations and
// the database at databaseURL, and closes it afterwards.
func withMigrate(ctx context.Context, databaseURL string, fn func(*migrate.Migrate) error) (err error) {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("parse database url: %w", err)
	}
	db := stdlib.OpenDB(*cfg)
	// The driver does not take a context: connect here so ctx bounds it.
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return fmt.Errorf("connect: %w", err)
	}
	driver, err := migratepgx.WithInstance(db, &migratepgx.Config{})
	if err != nil {
		db.Close()
		return fmt.Errorf("open migration driver: %w", err)
	}
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		driver.Close() // closes db too
		return fmt.Errorf("open embedded migrations: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", driver)
	if err != nil {
		src.Close()
		driver.Close()
		return fmt.Errorf("set up migrate: %w", err)
	}
	defer func() {
		srcErr, dbErr := m.Close()
		if err == nil {
			err = errors.Join(srcErr, dbErr)
		}
	}()

	// migrate checks GracefulStop between migrations; it has room for one value.
	stop := context.AfterFunc(ctx, func() { m.GracefulStop <- true })
	defer stop()
	return fn(m)
}

// eachMigration calls fn for every embedded migration in version order.
func eachMigration(fn func(version uint, name string)) error {
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return fmt.Errorf("open embedded migrations: %w", err)
	}
	defer src.Close()
	version, err := src.First()
	for err == nil {
		var name string
		if name, err = migrationName(src, version); err != nil {
			return err
		}
		fn(version, name)
		version, err = src.Next(version)
	}
	if errors.Is(err, fs.ErrNotExist) {
		// The source's way of saying there is no next version.
		return nil
	}
	return fmt.Errorf("read embedded migrations: %w", err)
}

// migrationName returns the name part of a version's up file: "init" for
// 000001_init.up.sql.
func migrationName(src source.Driver, version uint) (string, error) {
	r, name, err := src.ReadUp(version)
	if err != nil {
		return "", fmt.Errorf("read migration %d: %w", version, err)
	}
	r.Close()
	return name, nil
}
