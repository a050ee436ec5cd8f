package app

import (
	"context"
	"net"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/store/storetest"
)

// barePing is the Ping of the bare grpc-go baseline.
type barePing struct {
	shebav1.UnimplementedPingServiceServer
}

func (barePing) Ping(context.Context, *shebav1.PingRequest) (*shebav1.PingResponse, error) {
	return &shebav1.PingResponse{Message: "pong"}, nil
}

// BenchmarkGRPCPing calls Ping over loopback gRPC from 50 goroutines, as
// make bench's ping-grpc does with grpcload: sheba's whole server (with its API
// key, limits high enough never to reject, the log at warn, tracing off and
// tracing on with the call not sampled), and a bare grpc-go server with
// the same RPC in the same process, the baseline of the ratio. The client's
// cost is in every row alike.
func BenchmarkGRPCPing(b *testing.B) {
	runBenchCases(b, grpcPingBenchCases(b))
}

// grpcPingBenchCases are BenchmarkGRPCPing's rows.
func grpcPingBenchCases(tb testing.TB) []benchCase {
	const key = "bench-key-0123456789abcdefghijklmnop"
	cfg := config.Default()
	cfg.Database.URL = storetest.NewDatabase(tb)
	cfg.Auth.Keys = []config.APIKey{keyEntry("bench", key)}
	cfg.Limits.Rate, cfg.Limits.Burst = 1e9, 1e9
	cfg.Limits.PerKeyRate, cfg.Limits.PerKeyBurst = 1e9, 1e9
	cfg.Limits.MaxInflight = 1 << 20
	serve := func(opts ...Option) string {
		a := benchApp(tb, cfg, opts...)
		lis := listen(tb)
		go func() { _ = a.grpc.Serve(lis) }()
		tb.Cleanup(a.grpc.Stop)
		return lis.Addr().String()
	}
	bare := func() string {
		srv := grpc.NewServer()
		shebav1.RegisterPingServiceServer(srv, barePing{})
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		go func() { _ = srv.Serve(lis) }()
		tb.Cleanup(srv.Stop)
		return lis.Addr().String()
	}
	var cases []benchCase
	for _, bc := range []struct {
		name string
		addr string
	}{
		{"grpc-go", bare()},
		{"sheba", serve()},
		{"sheba-unsampled", serve(WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))))},
	} {
		cases = append(cases, benchCase{bc.name, func(b *testing.B) {
			conn, err := grpc.NewClient(bc.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), withKey(key))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			client := shebav1.NewPingServiceClient(conn)
			b.ReportAllocs()
			b.SetParallelism(25) // 50 callers on 2 CPUs
			cpu := processCPU()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := client.Ping(context.Background(), &shebav1.PingRequest{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			// The client's CPU and the server's, both in this process.
			if cpu := processCPU() - cpu; cpu > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			}
		}})
	}
	return cases
}
