// Command kratos is the Kratos v2 peer of `make bench` (bench/README.md):
// sheba's ping, GET /v1/ping and sheba.v1.PingService/Ping, served by a
// Kratos HTTP and gRPC server in one kratos.App, each with the middleware
// Kratos documents for production: recovery, logging (its logger filtered
// at warn, so a successful call, logged at info, is not printed), metrics
// (OpenTelemetry instruments read by Prometheus at GET /metrics) and rate
// limiting (the BBR limiter, which never refuses here: see limiter).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-kratos/aegis/ratelimit/bbr"
	"github.com/go-kratos/kratos/v2"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/go-kratos/kratos/v2/middleware"
	"github.com/go-kratos/kratos/v2/middleware/logging"
	"github.com/go-kratos/kratos/v2/middleware/metrics"
	"github.com/go-kratos/kratos/v2/middleware/ratelimit"
	"github.com/go-kratos/kratos/v2/middleware/recovery"
	"github.com/go-kratos/kratos/v2/transport/grpc"
	"github.com/go-kratos/kratos/v2/transport/http"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

func main() {
	httpAddr := flag.String("http", "127.0.0.1:0", "REST listen address")
	grpcAddr := flag.String("grpc", "127.0.0.1:0", "gRPC listen address")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, *httpAddr, *grpcAddr); err != nil {
		fmt.Fprintln(os.Stderr, "kratos:", err)
		os.Exit(1)
	}
}

// serve runs the app until ctx is done.
func serve(ctx context.Context, httpAddr, grpcAddr string) error {
	logger := log.NewFilter(log.With(log.NewStdLogger(os.Stderr), "ts", log.DefaultTimestamp, "caller", log.DefaultCaller),
		log.FilterLevel(log.LevelWarn))

	// Metrics as Kratos's metrics middleware documents them: OpenTelemetry
	// instruments, exported to Prometheus.
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return err
	}
	meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter)).Meter("peer-kratos")
	requests, err := metrics.DefaultRequestsCounter(meter, metrics.DefaultServerRequestsCounterName)
	if err != nil {
		return err
	}
	seconds, err := metrics.DefaultSecondsHistogram(meter, metrics.DefaultServerSecondsHistogramName)
	if err != nil {
		return err
	}
	chain := func() []middleware.Middleware {
		return []middleware.Middleware{
			recovery.Recovery(),
			logging.Server(logger),
			metrics.Server(metrics.WithRequests(requests), metrics.WithSeconds(seconds)),
			ratelimit.Server(ratelimit.WithLimiter(limiter())),
		}
	}

	hs := http.NewServer(http.Address(httpAddr), http.Middleware(chain()...))
	hs.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	registerPingHTTP(hs, pingServer{})
	gs := grpc.NewServer(grpc.Address(grpcAddr), grpc.Middleware(chain()...))
	shebav1.RegisterPingServiceServer(gs, pingServer{})

	app := kratos.New(kratos.Name("peer-kratos"), kratos.Context(ctx), kratos.Logger(logger), kratos.Server(hs, gs))
	return app.Run()
}

// limiter is the BBR limiter Kratos's ratelimit middleware uses by default,
// with a CPU threshold it never reaches: it refuses only while the machine's
// CPU use is over the threshold (800 of 1000 by default), which the bench's
// two saturated cores would be. Every call still goes through its counting.
func limiter() *bbr.BBR {
	return bbr.NewLimiter(bbr.WithCPUThreshold(1001))
}

type pingServer struct {
	shebav1.UnimplementedPingServiceServer
}

func (pingServer) Ping(context.Context, *shebav1.PingRequest) (*shebav1.PingResponse, error) {
	return &shebav1.PingResponse{Message: "pong"}, nil
}

// operationPing and registerPingHTTP are what Kratos's protoc-gen-go-http
// writes for PingService from its google.api.http option (GET /v1/ping),
// written here by hand rather than adding that plugin to make generate for
// one benchmark.
const operationPing = "/sheba.v1.PingService/Ping"

func registerPingHTTP(s *http.Server, srv shebav1.PingServiceServer) {
	r := s.Route("/")
	r.GET("/v1/ping", func(ctx http.Context) error {
		var in shebav1.PingRequest
		if err := ctx.BindQuery(&in); err != nil {
			return err
		}
		http.SetOperation(ctx, operationPing)
		h := ctx.Middleware(func(ctx context.Context, req any) (any, error) {
			return srv.Ping(ctx, req.(*shebav1.PingRequest))
		})
		out, err := h(ctx, &in)
		if err != nil {
			return err
		}
		return ctx.Result(200, out.(*shebav1.PingResponse))
	})
}
