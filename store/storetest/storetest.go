// Package storetest gives tests their own migrated Postgres database.
//
// The cluster comes from SHEBA_TEST_DATABASE_URL, an admin (superuser) URL
// that `make test` sets by running the tests under `scripts/pg.sh test`, which
// starts a throwaway Postgres. A test that finds the variable unset fails: a
// database test must never pass by not running.
//
// Once per test binary the package creates a template database, uniquely
// named because several test binaries share the cluster at once, and applies
// the embedded migrations to it. Every NewDatabase call then clones the
// template with CREATE DATABASE ... TEMPLATE, which copies files instead of
// replaying migrations, so each test gets a fresh, isolated schema cheaply
// and can call t.Parallel. Everything here is safe for concurrent use.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shebasvc/sheba/store"
)

// EnvDatabaseURL names the variable that holds the admin URL of the test
// cluster.
const EnvDatabaseURL = "SHEBA_TEST_DATABASE_URL"

// cleanupTimeout bounds dropping a database after a test; the test's own
// context is already canceled when cleanups run.
const cleanupTimeout = 30 * time.Second

// cluster is the test cluster and the template made on it. Its fields are
// set once, by setup, and only read afterwards.
type cluster struct {
	once     sync.Once
	admin    *pgxpool.Pool // connected to the cluster's admin database
	adminURL *url.URL
	template string // name of the migrated template database
	err      error  // why setup failed; every later test fails with it
}

// shared is the one cluster of this test binary. Package state is the price
// of NewDatabase(tb) needing no setup call; it is written only inside
// once.Do, so readers need no lock.
var shared cluster

// NewDatabase creates an empty, migrated database for the test and returns
// its URL. The database is dropped when the test and its subtests end.
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	c := shared.get(tb)

	name := "sheba_test_" + randomHex()
	createSQL := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize() +
		" TEMPLATE " + pgx.Identifier{c.template}.Sanitize()
	if _, err := c.admin.Exec(tb.Context(), createSQL); err != nil {
		tb.Fatalf("create test database %q: %v", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		// FORCE ends connections a test left open (a pool it did not close).
		dropSQL := "DROP DATABASE IF EXISTS " + pgx.Identifier{name}.Sanitize() + " WITH (FORCE)"
		if _, err := c.admin.Exec(ctx, dropSQL); err != nil {
			tb.Errorf("drop test database %q: %v", name, err)
		}
	})

	u := *c.adminURL
	u.Path = "/" + name
	u.RawPath = ""
	return u.String()
}

// NewPool creates a database like NewDatabase and returns a pool connected to
// it. The pool is closed, then the database dropped, when the test ends.
func NewPool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	dbURL := NewDatabase(tb)
	pool, err := pgxpool.New(tb.Context(), dbURL)
	if err != nil {
		tb.Fatalf("open pool on test database: %v", err)
	}
	// Registered after the drop, so it runs before it.
	tb.Cleanup(pool.Close)
	return pool
}

// get sets the cluster up on first use and fails tb if that failed.
func (c *cluster) get(tb testing.TB) *cluster {
	tb.Helper()
	c.once.Do(func() { c.err = c.setup() })
	if c.err != nil {
		tb.Fatal(c.err)
	}
	return c
}

// setup connects to the cluster and creates the migrated template.
func (c *cluster) setup() error {
	raw := os.Getenv(EnvDatabaseURL)
	if raw == "" {
		return errors.New(EnvDatabaseURL + " is not set: run the tests with 'make test' (it starts a throwaway Postgres)")
	}
	adminURL, err := url.Parse(raw)
	if err != nil {
		// The URL may hold a password: do not print it.
		return fmt.Errorf("%s is not a valid URL", EnvDatabaseURL)
	}

	// The first test's context would cancel the setup that later tests rely
	// on, so setup has its own bound.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := pgxpool.New(ctx, raw)
	if err != nil {
		return fmt.Errorf("connect to the test cluster (%s): %w", EnvDatabaseURL, err)
	}
	if err := admin.Ping(ctx); err != nil {
		admin.Close()
		return fmt.Errorf("connect to the test cluster (%s): %w", EnvDatabaseURL, err)
	}

	// The pid tells whose template it is when several binaries share the
	// cluster; the suffix keeps names unique across runs and pid reuse.
	template := fmt.Sprintf("sheba_template_%d_%s", os.Getpid(), randomHex())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{template}.Sanitize()); err != nil {
		admin.Close()
		return fmt.Errorf("create template database: %w", err)
	}
	templateURL := *adminURL
	templateURL.Path = "/" + template
	templateURL.RawPath = ""
	if err := store.MigrateUp(ctx, templateURL.String()); err != nil {
		admin.Close()
		return fmt.Errorf("migrate template database %q: %w", template, err)
	}
	// Postgres copies a template only while nobody is connected to it, and
	// migrating left no connection open. Refusing new connections keeps it
	// that way.
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{template}.Sanitize()+" ALLOW_CONNECTIONS false"); err != nil {
		admin.Close()
		return fmt.Errorf("lock template database: %w", err)
	}

	c.admin = admin
	c.adminURL = adminURL
	c.template = template
	return nil
}

// Run runs the tests of m, then drops the template database if a test made
// one, and returns the exit code. Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(storetest.Run(m)) }
//
// Without it the template stays until the cluster goes, which for
// `scripts/pg.sh test` is at the end of the run.
func Run(m *testing.M) int {
	code := m.Run()
	// Every test has ended, so reading the cluster's fields is race-free.
	if c := &shared; c.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if _, err := c.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{c.template}.Sanitize()+" WITH (FORCE)"); err != nil {
			fmt.Fprintf(os.Stderr, "storetest: drop template database %q: %v\n", c.template, err)
		}
		c.admin.Close()
	}
	return code
}

// randomHex returns 16 random hex digits for a database name.
func randomHex() string {
	var b [8]byte
	rand.Read(b[:]) // never fails: crypto/rand crashes the program instead
	return hex.EncodeToString(b[:])
}

// UnreachableURL returns the URL of a database that cannot be reached:
// nothing listens on its port, so connecting fails at once.
func UnreachableURL(tb testing.TB) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	addr := lis.Addr().String()
	// The port was free a moment ago and nothing of ours takes it again.
	lis.Close()
	return "postgres://postgres@" + addr + "/none?sslmode=disable&connect_timeout=2"
}
