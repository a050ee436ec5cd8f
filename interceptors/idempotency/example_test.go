package idempotency_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"

	"github.com/shebasvc/sheba/interceptors/apikey"
	"github.com/shebasvc/sheba/interceptors/idempotency"
	"github.com/shebasvc/sheba/store"
)

// The quoted form of the draft and a bare token name the same key.
func ExampleParseKey() {
	for _, v := range []string{`"order-42"`, `order-42`, `"a\"b"`, `two words`} {
		key, err := idempotency.ParseKey(v)
		fmt.Printf("%-14s %q %v\n", v, key, err)
	}
	// Output:
	// "order-42"     "order-42" <nil>
	// order-42       "order-42" <nil>
	// "a\"b"         "a\"b" <nil>
	// two words      "" must be 1 to 255 visible ASCII characters, bare or as a quoted string
}

// The interceptor goes last before the handler, on the methods that take
// keys only, and Reap runs beside the server.
func ExampleUnaryServerInterceptor() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://localhost/sheba")
	if err != nil {
		panic(err)
	}
	s := store.New(pool)
	creates := map[string]bool{"/sheba.v1.AccountService/CreateAccount": true}
	keys := selector.UnaryServerInterceptor(
		idempotency.UnaryServerInterceptor(s, apikey.IDFromContext, idempotency.WithTTL(24*time.Hour)),
		selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool { return creates[c.FullMethod()] }),
	)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor( /* auth, limits, timeout, */ keys))
	go idempotency.Reap(ctx, s, idempotency.ReapInterval(24*time.Hour), slog.Default())
	_ = srv
}
