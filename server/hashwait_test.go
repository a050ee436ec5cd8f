package server

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/idempotency"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
)

// TestHashWaitHoldsNoTransaction holds the only hash slot while a sign-up
// with an idempotency key waits for it, behind the idempotency
// interceptor as the chain runs it: meanwhile the sign-up holds no
// connection of the pool, and Postgres sees no session idle in a
// transaction (docs/operations.md#password-hashing). Once the slot is
// free, the sign-up, its record and its event commit as usual.
func TestHashWaitHoldsNoTransaction(t *testing.T) {
	pool := storetest.NewPool(t)
	st := store.New(pool)
	hasher, err := newPasswordHasher(defaultHashParams(), hashLimits{running: 1, waiting: 1})
	if err != nil {
		t.Fatal(err)
	}
	accounts := &accountServer{store: st, hasher: hasher, errs: errorMapper{log: slog.New(slog.DiscardHandler)}, events: noEvents{}}
	keys := idempotency.UnaryServerInterceptor(st, func(context.Context) string { return "caller" })
	info := &grpc.UnaryServerInfo{FullMethod: shebav1.AccountService_CreateAccount_FullMethodName}
	createAccount := func(ctx context.Context, req any) (any, error) {
		return accounts.CreateAccount(ctx, req.(*shebav1.CreateAccountRequest))
	}

	release, err := hasher.turn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs(idempotency.MetadataKey, "signup"))
		_, err := keys(ctx, &shebav1.CreateAccountRequest{Username: "wait", Password: "correct horse"}, info, createAccount)
		done <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); hasher.waiting.Load() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			release()
			t.Fatalf("the sign-up did not come to wait for the hash slot: %v", <-done)
		}
	}

	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Errorf("connections held while the sign-up waits for a hash slot: got %d, want 0", n)
	}
	var idle int
	if err := pool.QueryRow(t.Context(), `
		SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND state = 'idle in transaction'`).Scan(&idle); err != nil {
		t.Fatal(err)
	}
	if idle != 0 {
		t.Errorf("sessions idle in a transaction while the sign-up waits for a hash slot: got %d, want 0", idle)
	}

	release()
	if err := <-done; err != nil {
		t.Fatalf("sign-up once the slot is free: %v", err)
	}
	var accountRows, records int
	if err := pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM accounts), (SELECT count(*) FROM idempotency_keys)`).Scan(&accountRows, &records); err != nil {
		t.Fatal(err)
	}
	if accountRows != 1 || records != 1 {
		t.Errorf("after the sign-up: %d accounts, %d records; want 1 and 1", accountRows, records)
	}
}
