package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/concurrency"
	"github.com/shebasvc/sheba/interceptors/metrics"
	"github.com/shebasvc/sheba/interceptors/requestlog"
)

// benchStream is the server transport stream the chain sees in a real call
// (grpc.Method and grpc.SetHeader need one).
type benchStream struct{ method string }

func (s benchStream) Method() string                  { return s.method }
func (s benchStream) SetHeader(metadata.MD) error     { return nil }
func (s benchStream) SendHeader(metadata.MD) error    { return nil }
func (s benchStream) SetTrailer(metadata.MD) error    { return nil }
func (s benchStream) SetHeaderOnly(metadata.MD) error { return nil }

// BenchmarkChain measures the interceptor chain around a no-op handler, as
// each interceptor is added in chain order ("none" is the bare handler).
// Limits are high enough never to reject.
func BenchmarkChain(b *testing.B) {
	runBenchCases(b, chainBenchCases(b))
}

// chainBenchCases are BenchmarkChain's rows; the last is the full chain.
func chainBenchCases(tb testing.TB) []benchCase {
	cfg, ctx, info, req := benchCall()
	withRates(&cfg)
	links := chainLinks(benchDeps(tb, cfg))
	// The chain grows one link at a time: the difference between two rows is
	// the cost of the link added.
	var cases []benchCase
	for n := 0; n <= len(links); n++ {
		name := "none"
		if n > 0 {
			name = "+" + links[n-1].name
		}
		interceptors := make([]grpc.UnaryServerInterceptor, n)
		for i := range n {
			interceptors[i] = links[i].interceptor
		}
		handler := grpc.UnaryServerInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(ctx, req)
		})
		if n > 0 {
			handler = chainUnary(interceptors...)
		}
		cases = append(cases, benchCase{fmt.Sprintf("%d%s", n, name), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := handler(ctx, req, info, noopHandler); err != nil {
					b.Fatal(err)
				}
			}
		}})
	}
	return cases
}

// benchCase is one sub-benchmark: its name and its body, which
// TestAllocationGoals runs too.
type benchCase struct {
	name string
	run  func(b *testing.B)
}

// runBenchCases runs each case as a sub-benchmark of b.
func runBenchCases(b *testing.B, cases []benchCase) {
	for _, c := range cases {
		b.Run(c.name, c.run)
	}
}

// noopHandler is the handler of the chain benchmarks.
func noopHandler(context.Context, any) (any, error) { return nil, nil }

// withRates turns both rate limits on, high enough never to reject.
func withRates(cfg *config.Config) {
	cfg.Limits.Rate, cfg.Limits.Burst = 1e9, 1e9
	cfg.Limits.PerKeyRate, cfg.Limits.PerKeyBurst = 1e9, 1e9
}

// benchCall returns a config with one API key and limits that never
// reject, and the context, info and (valid) request of a GetAccount call
// that sends the key.
func benchCall() (config.Config, context.Context, *grpc.UnaryServerInfo, *shebav1.GetAccountRequest) {
	const key = "bench-key-0123456789abcdefghijklmnop"
	sum := sha256.Sum256([]byte(key))
	cfg := config.Default()
	cfg.Auth.Keys = []config.APIKey{{ID: "bench", SHA256: hex.EncodeToString(sum[:])}}
	cfg.Limits.MaxInflight = 1 << 20
	cfg.Limits.Timeout = time.Minute
	const method = "/sheba.v1.AccountService/GetAccount"
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", key))
	ctx = grpc.NewContextWithServerTransportStream(ctx, benchStream{method: method})
	return cfg, ctx, &grpc.UnaryServerInfo{FullMethod: method}, &shebav1.GetAccountRequest{AccountId: "00000000-0000-4000-8000-000000000001"}
}

func benchDeps(tb testing.TB, cfg config.Config) chainDeps {
	m, err := metrics.New(prometheus.NewRegistry(), []string{"/sheba.v1.AccountService/GetAccount"})
	if err != nil {
		tb.Fatal(err)
	}
	authn, ids, err := newAuthenticator(cfg.Auth, m)
	if err != nil {
		tb.Fatal(err)
	}
	// In process: the chain benchmarks run without Redis.
	rate := newRateLimits(cfg.Limits, nil, ids)
	validator, err := newValidator()
	if err != nil {
		tb.Fatal(err)
	}
	return chainDeps{
		validator: validator,
		limits:    cfg.Limits,
		rate:      rate,
		authn:     authn,
		keyIDs:    ids,
		log:       slog.New(requestlog.NewJSONHandler(io.Discard, nil)), // as serve's
		inflight:  concurrency.NewLimiter(cfg.Limits.MaxInflight),
		metrics:   m,
	}
}

// BenchmarkChainTracing runs the full chain inside a server span, as the
// tracing stats handler makes one: tracing off, on with the sampler
// dropping every span, and on sampling every span to an exporter that drops
// them. Each "span" row is the span alone (tracer.Start and End): the
// chain's own cost under it is the difference between the two rows.
func BenchmarkChainTracing(b *testing.B) {
	cfg, ctx, info, req := benchCall()
	chain := unaryChain(benchDeps(b, cfg))
	spanOnly := func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) { return nil, nil }
	method := info.FullMethod

	for _, tc := range []struct {
		name string
		tp   trace.TracerProvider
	}{
		{"off", tracenoop.NewTracerProvider()},
		{"never-sample", sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))},
		{"always-sample", sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(tracetest.NewNoopExporter()))},
	} {
		tracer := tc.tp.Tracer("bench")
		for _, run := range []struct {
			name  string
			chain grpc.UnaryServerInterceptor
		}{{"span", spanOnly}, {"chain", chain}} {
			b.Run(tc.name+"/"+run.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					sctx, span := tracer.Start(ctx, method, trace.WithSpanKind(trace.SpanKindServer))
					if _, err := run.chain(sctx, req, info, noopHandler); err != nil {
						b.Fatal(err)
					}
					span.End()
				}
			})
		}
	}
}

// TestUnsampledSpanAllocations checks that a span that is not sampled adds
// no allocation to a call through the full chain (its trace and span ids
// still go in the log line, in the call's memory). The chain's own goal is
// in allocGoals.
func TestUnsampledSpanAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts drift under -race (sync.Pool drops items at random); run without -race: go test -run TestUnsampledSpanAllocations ./internal/app")
	}
	cfg, ctx, info, req := benchCall()
	withRates(&cfg)
	chain := unaryChain(benchDeps(t, cfg))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	unsampled, span := tp.Tracer("test").Start(ctx, info.FullMethod, trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	if sc := span.SpanContext(); !sc.IsValid() || sc.IsSampled() {
		t.Fatalf("span context %v: want a valid one, not sampled", sc)
	}

	allocs := func(ctx context.Context) float64 {
		return testing.AllocsPerRun(200, func() {
			if _, err := chain(ctx, req, info, noopHandler); err != nil {
				t.Fatal(err)
			}
		})
	}
	untraced, traced := allocs(ctx), allocs(unsampled)
	if traced != untraced {
		t.Errorf("under a span not sampled the chain allocates %v times a call, want %v as without", traced, untraced)
	}
}
