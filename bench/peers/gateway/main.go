// Command gateway is the "grpc-gateway v2 + go-grpc-middleware v2, as
// documented" peer of `make bench` (bench/README.md): a grpc.Server serving
// sheba.v1.PingService with go-grpc-middleware's interceptors as its
// example server chains them (Prometheus metrics from its prometheus
// provider, logging through log/slog, rate limiting, recovery), and
// grpc-gateway's runtime.ServeMux serving GET /v1/ping by dialing that
// server over loopback, as grpc-gateway's README shows. The logger is at
// warn: a successful call is logged at info, and not printed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

func main() {
	httpAddr := flag.String("http", "127.0.0.1:0", "REST (grpc-gateway) listen address")
	grpcAddr := flag.String("grpc", "127.0.0.1:0", "gRPC listen address")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, *httpAddr, *grpcAddr); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

// serve runs both servers until ctx is done.
func serve(ctx context.Context, httpAddr, grpcAddr string) error {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	reg := prometheus.NewRegistry()
	metrics := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
		grpcprom.WithHistogramBuckets([]float64{0.001, 0.01, 0.1, 0.3, 0.6, 1, 3, 6, 9, 20, 30, 60, 90, 120})))
	reg.MustRegister(metrics)
	panics := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "grpc_req_panics_recovered_total",
		Help: "Total number of gRPC requests recovered from internal panic.",
	})
	reg.MustRegister(panics)
	onPanic := func(p any) error {
		panics.Inc()
		logger.Error("recovered from panic", "panic", p)
		return status.Errorf(codes.Internal, "%s", p)
	}

	gs := grpc.NewServer(
		grpc.ChainUnaryInterceptor(
			metrics.UnaryServerInterceptor(),
			logging.UnaryServerInterceptor(interceptorLogger(logger)),
			ratelimit.UnaryServerInterceptor(limiter{rate.NewLimiter(1e6, 1e6)}),
			recovery.UnaryServerInterceptor(recovery.WithRecoveryHandler(onPanic)),
		),
		grpc.ChainStreamInterceptor(
			metrics.StreamServerInterceptor(),
			logging.StreamServerInterceptor(interceptorLogger(logger)),
			ratelimit.StreamServerInterceptor(limiter{rate.NewLimiter(1e6, 1e6)}),
			recovery.StreamServerInterceptor(recovery.WithRecoveryHandler(onPanic)),
		),
	)
	shebav1.RegisterPingServiceServer(gs, pingServer{})
	metrics.InitializeMetrics(gs)

	glis, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		return err
	}
	mux := runtime.NewServeMux()
	if err := shebav1.RegisterPingServiceHandlerFromEndpoint(ctx, mux, glis.Addr().String(),
		[]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}); err != nil {
		glis.Close()
		return err
	}
	if err := mux.HandlePath(http.MethodGet, "/metrics", func(w http.ResponseWriter, r *http.Request, _ map[string]string) {
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	}); err != nil {
		glis.Close()
		return err
	}
	hs := &http.Server{Addr: httpAddr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	errs := make(chan error, 2)
	go func() { errs <- gs.Serve(glis) }()
	go func() { errs <- hs.ListenAndServe() }()
	select {
	case err = <-errs:
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(shutdownCtx)
	gs.GracefulStop()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// interceptorLogger adapts slog to go-grpc-middleware's logging, as its
// README shows.
func interceptorLogger(l *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		l.Log(ctx, slog.Level(lvl), msg, fields...)
	})
}

// limiter is go-grpc-middleware's ratelimit.Limiter over a token bucket of
// golang.org/x/time/rate, at a million a second so that it never refuses
// during the bench (sheba's bench config has the same).
type limiter struct{ *rate.Limiter }

func (l limiter) Limit(context.Context) error {
	if !l.Allow() {
		return errors.New("rate limit exceeded")
	}
	return nil
}

type pingServer struct {
	shebav1.UnimplementedPingServiceServer
}

func (pingServer) Ping(context.Context, *shebav1.PingRequest) (*shebav1.PingResponse, error) {
	return &shebav1.PingResponse{Message: "pong"}, nil
}
