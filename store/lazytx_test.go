package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
)

// TestLazyTx checks that a LazyTx holds no connection until the first
// store call with its context, which begins it after onBegin; that InTx
// and every method join it without ending it; and that only its owner
// commits or rolls it back.
func TestLazyTx(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	s := store.New(pool)
	ctx := t.Context()

	began := 0
	txCtx, tx := s.WithLazyTx(ctx, func(ctx context.Context) error {
		if _, ok := store.TxFromContext(ctx); !ok {
			t.Error("onBegin runs outside the transaction")
		}
		began++
		return nil
	})
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Errorf("connections held before the first store call: got %d, want 0", n)
	}
	a, err := s.CreateAccount(txCtx, "lazy", "hash")
	if err != nil {
		t.Fatalf("first call: %v", err)
	}
	err = s.InTx(txCtx, func(ctx context.Context) error {
		_, err := s.CreateSubscription(ctx, a.ID, "pro")
		return err
	})
	if err != nil {
		t.Fatalf("InTx in the lazy transaction: %v", err)
	}
	if _, err := s.GetActiveSubscription(ctx, a.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("subscription outside before the commit: got %v, want ErrNotFound", err)
	}
	if began != 1 || pool.Stat().AcquiredConns() != 1 {
		t.Errorf("began %d times on %d connections, want once on 1", began, pool.Stat().AcquiredConns())
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	tx.Rollback(ctx)
	if _, err := s.GetActiveSubscription(ctx, a.ID); err != nil {
		t.Errorf("subscription after the commit: %v", err)
	}
	if _, err := s.GetAccount(txCtx, a.ID); err == nil {
		t.Error("store call after the commit: got no error, want the transaction ended")
	}

	// An onBegin that fails fails the call that began the transaction and
	// every later one, holding no connection; the rollback undoes it.
	boom := errors.New("boom")
	txCtx, tx = s.WithLazyTx(ctx, func(ctx context.Context) error {
		if _, err := s.CreateAccount(ctx, "undone", "hash"); err != nil {
			return err
		}
		return boom
	})
	defer tx.Rollback(ctx)
	for range 2 {
		if _, err := s.GetAccount(txCtx, a.ID); !errors.Is(err, boom) {
			t.Errorf("call after a failed onBegin: got %v, want boom", err)
		}
	}
	if err := s.InTx(txCtx, func(context.Context) error { return nil }); !errors.Is(err, boom) {
		t.Errorf("InTx after a failed onBegin: got %v, want boom", err)
	}
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Errorf("connections held after a failed onBegin: got %d, want 0", n)
	}
	if _, err := s.GetAccountByUsername(ctx, "undone"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("write of a failed onBegin: got %v, want ErrNotFound", err)
	}
}
