package app

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/server"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
)

// BenchmarkCreateSubscription measures what an idempotency key adds to a
// create. Each iteration makes three subscriptions on fresh accounts, in
// rotating order, and times each: one without a key (one autocommitted
// INSERT), one without a key but in a transaction of its own (BEGIN,
// INSERT, COMMIT: what a create costs once it enqueues an event in its
// transaction), and one with a new key, claimed and recorded every time.
// Load that comes and goes on the machine weighs on all three alike. It
// reports the mean time of each and the ratios key/no-key and
// key/no-key-tx.
//
//   - handler: the chain and the handler called directly, the database
//     round trips and little else;
//   - grpc: the whole chain in a grpc.Server over loopback, as a client
//     sees a CreateSubscription.
func BenchmarkCreateSubscription(b *testing.B) {
	kinds := []string{"no-key", "no-key-tx", "key"}
	for _, via := range []string{"handler", "grpc"} {
		b.Run(via, func(b *testing.B) {
			s := store.New(storetest.NewPool(b))
			create := newBenchCreate(b, via, s)
			ids := benchAccounts(b, s, len(kinds)*b.N)
			spent := make([]time.Duration, len(kinds))
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				for j := range kinds {
					k := (i + j) % len(kinds)
					ctx := b.Context()
					switch kinds[k] {
					case "no-key-tx":
						ctx = metadata.AppendToOutgoingContext(ctx, benchTxKey, "1")
					case "key":
						ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", fmt.Sprint("bench-", i))
					}
					start := time.Now()
					if err := create(ctx, &shebav1.CreateSubscriptionRequest{AccountId: ids[len(kinds)*i+j], Plan: "pro"}); err != nil {
						b.Fatal(err)
					}
					spent[k] += time.Since(start)
				}
			}
			for k, kind := range kinds {
				b.ReportMetric(float64(spent[k].Nanoseconds())/float64(b.N), kind+"-ns/create")
			}
			b.ReportMetric(float64(spent[2])/float64(spent[0]), "key/no-key")
			b.ReportMetric(float64(spent[2])/float64(spent[1]), "key/no-key-tx")
		})
	}
}

// benchTxKey is the metadata that makes the benchmark run a call without a
// key in a transaction.
const benchTxKey = "bench-tx"

// newBenchCreate returns a CreateSubscription through the chain with
// idempotency over s: called directly ("handler") or through a grpc.Server
// on loopback ("grpc"). The key is taken from the outgoing metadata of ctx.
func newBenchCreate(b *testing.B, via string, s *store.Store) func(ctx context.Context, req *shebav1.CreateSubscriptionRequest) error {
	cfg, callCtx, _, _ := benchCall()
	services, err := server.New(s, server.Options{})
	if err != nil {
		b.Fatal(err)
	}
	d := benchDeps(b, cfg)
	d.keys, d.idempotent, d.keyTTL = s, server.IdempotentMethods(), cfg.Idempotency.TTL
	d.dbUp, d.needsDB = func() bool { return true }, server.DatabaseMethods()
	keyed := unaryChain(d)
	// Calls that ask for it run in a transaction of their own, as a
	// create that enqueues its event does.
	chain := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		if len(metadata.ValueFromIncomingContext(ctx, benchTxKey)) == 0 {
			return keyed(ctx, req, info, handler)
		}
		err = s.InTx(ctx, func(ctx context.Context) error {
			resp, err = keyed(ctx, req, info, handler)
			return err
		})
		return resp, err
	}
	if via == "handler" {
		info := &grpc.UnaryServerInfo{FullMethod: shebav1.SubscriptionService_CreateSubscription_FullMethodName}
		callCtx = grpc.NewContextWithServerTransportStream(callCtx, benchStream{method: info.FullMethod})
		subs := implementations{}
		services.Register(subs)
		handler := func(ctx context.Context, req any) (any, error) {
			return subs[shebav1.SubscriptionService_ServiceDesc.ServiceName].(shebav1.SubscriptionServiceServer).CreateSubscription(ctx, req.(*shebav1.CreateSubscriptionRequest))
		}
		return func(ctx context.Context, req *shebav1.CreateSubscriptionRequest) error {
			// The call's metadata: the API key, and the idempotency key if
			// the caller put one in ctx.
			md, _ := metadata.FromIncomingContext(callCtx)
			out, _ := metadata.FromOutgoingContext(ctx)
			_, err := chain(metadata.NewIncomingContext(callCtx, metadata.Join(md, out)), req, info, handler)
			return err
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(chain))
	services.Register(srv)
	go func() { _ = srv.Serve(lis) }()
	key, _ := metadata.FromIncomingContext(callCtx)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		withKey(key.Get("x-api-key")[0]))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		conn.Close()
		srv.Stop()
	})
	client := shebav1.NewSubscriptionServiceClient(conn)
	return func(ctx context.Context, req *shebav1.CreateSubscriptionRequest) error {
		_, err := client.CreateSubscription(ctx, req)
		return err
	}
}

// benchAccounts inserts n accounts in one statement and returns their ids.
func benchAccounts(b *testing.B, s *store.Store, n int) []string {
	b.Helper()
	var ids []string
	err := s.InTx(b.Context(), func(ctx context.Context) error {
		tx, _ := store.TxFromContext(ctx)
		rows, err := tx.Query(ctx, `
			INSERT INTO accounts (username, password_hash)
			SELECT 'bench-' || g, 'no-login' FROM generate_series(1, $1) AS g
			RETURNING id::text`, n)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return rows.Err()
	})
	if err != nil {
		b.Fatal(err)
	}
	return ids
}
