package store_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
)

func TestMain(m *testing.M) {
	os.Exit(storetest.Run(m))
}

// newStore returns a Store on a fresh database of its own.
func newStore(tb testing.TB) *store.Store {
	tb.Helper()
	return store.New(storetest.NewPool(tb))
}

// mustCreateAccount creates an account or fails the test.
func mustCreateAccount(tb testing.TB, s *store.Store, username string) store.Account {
	tb.Helper()
	a, err := s.CreateAccount(tb.Context(), username, "hash-of-"+username)
	if err != nil {
		tb.Fatalf("CreateAccount(%q): %v", username, err)
	}
	return a
}

// checkRecent fails the test unless tm is in UTC and within a minute of now:
// the database's clock is this machine's.
func checkRecent(tb testing.TB, what string, tm time.Time) {
	tb.Helper()
	if tm.Location() != time.UTC {
		tb.Errorf("%s location: got %v, want UTC", what, tm.Location())
	}
	if d := time.Since(tm).Abs(); d > time.Minute {
		tb.Errorf("%s: got %v, want within a minute of now", what, tm)
	}
}

// checkUUID fails the test unless id is a canonical uuid.
func checkUUID(tb testing.TB, what, id string) {
	tb.Helper()
	u, err := uuid.Parse(id)
	if err != nil || u.String() != id {
		tb.Errorf("%s: got %q, want a canonical uuid", what, id)
	}
}

func TestPing(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	s := store.New(pool)
	if err := s.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: got %v, want nil", err)
	}
	pool.Close()
	err := s.Ping(t.Context())
	if err == nil {
		t.Fatal("Ping on a closed pool: got nil, want an error")
	}
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
		t.Errorf("Ping on a closed pool: got sentinel %v, want a plain error", err)
	}
}

// TestContextErrors checks that a canceled context stays visible through the
// store's wrapping, so handlers can map it to the matching code.
func TestContextErrors(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.GetAccount(ctx, uuid.NewString())
	if !errors.Is(err, context.Canceled) {
		t.Errorf("GetAccount with a canceled context: got %v, want context.Canceled", err)
	}
	if errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetAccount with a canceled context: got %v, want no ErrNotFound", err)
	}
}

// TestUnavailable checks that a database that cannot be reached is
// ErrUnavailable, whatever the driver said.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	pool, err := store.OpenPool(t.Context(), storetest.UnreachableURL(t), 2, tracenoop.NewTracerProvider())
	if err != nil {
		t.Fatalf("OpenPool: %v", err)
	}
	defer pool.Close()
	s := store.New(pool)
	if _, err := s.GetAccount(t.Context(), uuid.NewString()); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("GetAccount on a closed port: got %v, want ErrUnavailable", err)
	}
	if err := s.Ping(t.Context()); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Ping on a closed port: got %v, want ErrUnavailable", err)
	}
}

// TestInTx checks that the changes made in InTx commit together, or not at
// all when the function fails, and that nested calls join the transaction.
func TestInTx(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()

	var created store.Account
	err := s.InTx(ctx, func(ctx context.Context) error {
		if _, ok := store.TxFromContext(ctx); !ok {
			t.Error("the context of InTx's function carries no transaction")
		}
		a, err := s.CreateAccount(ctx, "committed", "hash")
		if err != nil {
			return err
		}
		created = a
		return s.InTx(ctx, func(ctx context.Context) error {
			_, err := s.CreateSubscription(ctx, a.ID, "pro")
			return err
		})
	})
	if err != nil {
		t.Fatalf("InTx: %v", err)
	}
	if _, err := s.GetActiveSubscription(ctx, created.ID); err != nil {
		t.Errorf("subscription after commit: got %v, want it", err)
	}

	boom := errors.New("boom")
	err = s.InTx(ctx, func(txCtx context.Context) error {
		if _, err := s.CreateAccount(txCtx, "rolled-back", "hash"); err != nil {
			return err
		}
		// The transaction sees its own row before it ends; the pool does not.
		if _, err := s.GetAccountByUsername(txCtx, "rolled-back"); err != nil {
			return err
		}
		if _, err := s.GetAccountByUsername(ctx, "rolled-back"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("uncommitted account seen outside the transaction: %v", err)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("InTx with a failing function: got %v, want boom", err)
	}
	if _, err := s.GetAccountByUsername(ctx, "rolled-back"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("account after rollback: got %v, want ErrNotFound", err)
	}

	// A sentinel from inside comes out as itself.
	err = s.InTx(ctx, func(ctx context.Context) error {
		_, err := s.CreateAccount(ctx, "committed", "hash")
		return err
	})
	if !errors.Is(err, store.ErrConflict) {
		t.Errorf("InTx with a taken username: got %v, want ErrConflict", err)
	}
}
