package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
)

var errStop = errors.New("stop")

// lockKey runs LockIdempotencyKey in a transaction of its own, which ends
// before it returns.
func lockKey(t *testing.T, s *store.Store, k store.IdempotencyKey) (*store.IdempotencyRecord, bool) {
	t.Helper()
	var (
		rec    *store.IdempotencyRecord
		locked bool
	)
	err := s.InTx(t.Context(), func(ctx context.Context) error {
		var err error
		rec, locked, err = s.LockIdempotencyKey(ctx, k)
		return err
	})
	if err != nil {
		t.Fatalf("LockIdempotencyKey: %v", err)
	}
	return rec, locked
}

func TestIdempotencyKeys(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	k := store.IdempotencyKey{Caller: "billing", Method: "/sheba.v1.X/Y", Key: "k1"}
	rec := store.IdempotencyRecord{Fingerprint: []byte{1, 2, 3}, Code: 6, Response: []byte("answer")}

	if got, locked := lockKey(t, s, k); got != nil || !locked {
		t.Fatalf("unused key: got %v, locked %v; want no record, locked", got, locked)
	}
	if _, err := s.GetIdempotencyKey(ctx, k); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetIdempotencyKey of an unused key: got %v, want ErrNotFound", err)
	}

	// While one transaction holds the key, another cannot lock it, and
	// sees no record until the first commits.
	held := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.InTx(ctx, func(ctx context.Context) error {
			if _, locked, err := s.LockIdempotencyKey(ctx, k); err != nil || !locked {
				return fmt.Errorf("first lock: locked %v, %v", locked, err)
			}
			inserted, err := s.RecordIdempotencyKey(ctx, k, rec, time.Hour)
			if err != nil || !inserted {
				return fmt.Errorf("first record: inserted %v, %v", inserted, err)
			}
			close(held)
			<-release
			return nil
		})
	}()
	<-held
	if got, locked := lockKey(t, s, k); got != nil || locked {
		t.Errorf("key held by another transaction: got %v, locked %v; want no record, not locked", got, locked)
	}
	other := store.IdempotencyKey{Caller: "other", Method: k.Method, Key: k.Key}
	if got, locked := lockKey(t, s, other); got != nil || !locked {
		t.Errorf("same key of another caller: got %v, locked %v; want no record, locked", got, locked)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	got, _ := lockKey(t, s, k)
	if got == nil {
		t.Fatal("committed key: got no record")
	}
	if diff := cmp.Diff(rec, *got); diff != "" {
		t.Errorf("LockIdempotencyKey record mismatch (-want +got):\n%s", diff)
	}
	stored, err := s.GetIdempotencyKey(ctx, k)
	if err != nil {
		t.Fatalf("GetIdempotencyKey: %v", err)
	}
	if diff := cmp.Diff(rec, stored); diff != "" {
		t.Errorf("GetIdempotencyKey mismatch (-want +got):\n%s", diff)
	}

	// A second record of the key is refused and changes nothing.
	inserted, err := s.RecordIdempotencyKey(ctx, k, store.IdempotencyRecord{Fingerprint: []byte{9}, Response: []byte("x")}, time.Hour)
	if err != nil || inserted {
		t.Errorf("second record: got inserted %v, %v; want false, nil", inserted, err)
	}
	if stored, _ := s.GetIdempotencyKey(ctx, k); !cmp.Equal(rec, stored) {
		t.Errorf("after a refused record: got %v, want %v", stored, rec)
	}
}

// TestIdempotencyKeyRolledBack checks that a record goes with its
// transaction.
func TestIdempotencyKeyRolledBack(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	k := store.IdempotencyKey{Caller: "c", Method: "/m", Key: "k"}
	err := s.InTx(t.Context(), func(ctx context.Context) error {
		if _, err := s.RecordIdempotencyKey(ctx, k, store.IdempotencyRecord{Fingerprint: []byte{1}, Response: []byte{}}, time.Hour); err != nil {
			return err
		}
		return errStop
	})
	if !errors.Is(err, errStop) {
		t.Fatalf("InTx: got %v, want errStop", err)
	}
	if _, err := s.GetIdempotencyKey(t.Context(), k); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after rollback: got %v, want ErrNotFound", err)
	}
}

// expire moves the expiry of every record of caller into the past.
func expire(t *testing.T, pool *pgxpool.Pool, caller string) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), `UPDATE idempotency_keys SET expire_time = now() - interval '1 second' WHERE caller = $1`, caller); err != nil {
		t.Fatal(err)
	}
}

func TestIdempotencyKeyExpired(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	s := store.New(pool)
	ctx := t.Context()
	k := store.IdempotencyKey{Caller: "c", Method: "/m", Key: "k"}
	first := store.IdempotencyRecord{Fingerprint: []byte{1}, Response: []byte("first")}
	if inserted, err := s.RecordIdempotencyKey(ctx, k, first, time.Hour); err != nil || !inserted {
		t.Fatalf("record: got %v, %v", inserted, err)
	}
	expire(t, pool, "c")

	if got, locked := lockKey(t, s, k); got != nil || !locked {
		t.Errorf("expired key: got %v, locked %v; want no record, locked", got, locked)
	}
	if _, err := s.GetIdempotencyKey(ctx, k); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetIdempotencyKey of an expired key: got %v, want ErrNotFound", err)
	}
	second := store.IdempotencyRecord{Fingerprint: []byte{2}, Code: 5, Response: []byte("second")}
	if inserted, err := s.RecordIdempotencyKey(ctx, k, second, time.Hour); err != nil || !inserted {
		t.Fatalf("record over an expired one: got %v, %v; want true", inserted, err)
	}
	if got, err := s.GetIdempotencyKey(ctx, k); err != nil || !cmp.Equal(second, got) {
		t.Errorf("after replacing: got %v, %v; want %v", got, err, second)
	}
}

func TestDeleteExpiredIdempotencyKeys(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	s := store.New(pool)
	ctx := t.Context()
	for i := range 7 {
		for _, caller := range []string{"old", "new"} {
			k := store.IdempotencyKey{Caller: caller, Method: "/m", Key: fmt.Sprint(i)}
			if _, err := s.RecordIdempotencyKey(ctx, k, store.IdempotencyRecord{Fingerprint: []byte{1}, Response: []byte{}}, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
	}
	expire(t, pool, "old")

	// Batches of 3: 3, 3, 1, then nothing; the unexpired rows stay.
	var got []int64
	for range 4 {
		n, err := s.DeleteExpiredIdempotencyKeys(ctx, 3)
		if err != nil {
			t.Fatalf("DeleteExpiredIdempotencyKeys: %v", err)
		}
		got = append(got, n)
	}
	if diff := cmp.Diff([]int64{3, 3, 1, 0}, got); diff != "" {
		t.Errorf("deleted per batch mismatch (-want +got):\n%s", diff)
	}
	rows, err := pool.Query(ctx, `SELECT caller, count(*) FROM idempotency_keys GROUP BY caller`)
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]int{}
	for rows.Next() {
		var caller string
		var n int
		if err := rows.Scan(&caller, &n); err != nil {
			t.Fatal(err)
		}
		left[caller] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{"new": 7}, left); diff != "" {
		t.Errorf("rows left mismatch (-want +got):\n%s", diff)
	}
}

// TestInTxRollbackAfterCancel checks that a transaction whose context ended
// is rolled back on its connection: its locks are free at once, and the
// pool keeps the connection.
func TestInTxRollbackAfterCancel(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	s := store.New(pool)
	k := store.IdempotencyKey{Caller: "c", Method: "/m", Key: "k"}
	lockKey(t, s, k) // warms the pool: one connection
	conns := pool.Stat().NewConnsCount()

	ctx, cancel := context.WithCancel(t.Context())
	err := s.InTx(ctx, func(ctx context.Context) error {
		if _, locked, err := s.LockIdempotencyKey(ctx, k); err != nil || !locked {
			return fmt.Errorf("lock: locked %v, %v", locked, err)
		}
		cancel()
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("InTx: got %v, want context.Canceled", err)
	}
	if _, locked := lockKey(t, s, k); !locked {
		t.Error("lock of a rolled-back transaction: still held")
	}
	if got := pool.Stat().NewConnsCount(); got != conns {
		t.Errorf("connections opened: got %d, want %d (the rolled-back one reused)", got, conns)
	}
}
