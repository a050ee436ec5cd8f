package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/concurrency"
	"github.com/shebasvc/sheba/interceptors/metrics"
	"github.com/shebasvc/sheba/store"
)

// Server serves the sheba.v1 API over gRPC and REST, with health, readiness
// and the OpenAPI document.
type Server struct {
	cfg    config.Config
	log    *slog.Logger
	health *healthChecker
	grpc   *grpc.Server
	http   *http.Server
	// stopWatch ends the health Watch streams, which would otherwise hold
	// GracefulStop until the shutdown timeout.
	stopWatch chan struct{}
}

type options struct {
	healthInterval time.Duration
	hook           func(ctx context.Context, method string) error
	tracerProvider trace.TracerProvider
}

// Option configures a Server.
type Option func(*options)

// WithHealthInterval sets how often the database is pinged for health
// (default 2s).
func WithHealthInterval(d time.Duration) Option {
	return func(o *options) { o.healthInterval = d }
}

// WithTracerProvider sends the spans of every call to tp (default: no
// tracing).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracerProvider = tp }
}

// New builds a Server from cfg. It does not connect anywhere: the database
// may be down at start, and the server then starts not ready.
func New(ctx context.Context, cfg config.Config, st *store.Store, log *slog.Logger, opts ...Option) (*Server, error) {
	o := options{healthInterval: 2 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	if o.tracerProvider == nil {
		o.tracerProvider = tracenoop.NewTracerProvider()
	}
	// Each server has its own registry, served at GET /metrics.
	registry := prometheus.NewRegistry()
	hasher, err := newPasswordHasher(defaultHashParams())
	if err != nil {
		return nil, err
	}
	errs := errorMapper{log: log}
	services := []struct {
		desc *grpc.ServiceDesc
		impl any
	}{
		{&shebav1.PingService_ServiceDesc, pingServer{}},
		{&shebav1.AccountService_ServiceDesc, &accountServer{store: st, hasher: hasher, errs: errs}},
		{&shebav1.SubscriptionService_ServiceDesc, &subscriptionServer{store: st, errs: errs}},
	}
	var names, methods []string
	needsDB := map[string]bool{}
	businessService := map[string]bool{}
	for _, svc := range services {
		names = append(names, svc.desc.ServiceName)
		businessService[svc.desc.ServiceName] = true
		for _, m := range svc.desc.Methods {
			full := "/" + svc.desc.ServiceName + "/" + m.MethodName
			methods = append(methods, full)
			// Every method but the ping reads or writes the database.
			needsDB[full] = svc.desc != &shebav1.PingService_ServiceDesc
		}
	}
	m, err := metrics.New(registry, methods)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	inflight := concurrency.NewLimiter(cfg.Limits.MaxInflight)
	if err := registerCollectors(registry, st, inflight); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}

	s := &Server{
		cfg:       cfg,
		log:       log,
		health:    newHealthChecker(st.Ping, o.healthInterval, names),
		stopWatch: make(chan struct{}),
	}

	chain, err := unaryChain(cfg, chainDeps{
		log:      log,
		inflight: inflight,
		metrics:  m,
		dbUp:     s.health.databaseUp,
		needsDB:  needsDB,
		hook:     o.hook,
	})
	if err != nil {
		return nil, err
	}
	// With tracing off, the instrumentation is left out rather than run
	// against a no-op provider: it allocates on every call all the same.
	_, tracingOff := o.tracerProvider.(tracenoop.TracerProvider)
	propagator := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	grpcOpts := []grpc.ServerOption{
		// The chain is for business calls only: grpc.health.v1 (and
		// reflection) answer without a key, limits or shedding, like the
		// operator endpoints on HTTP, so probes work under any load.
		grpc.UnaryInterceptor(selector.UnaryServerInterceptor(chain, selector.MatchFunc(
			func(_ context.Context, c interceptors.CallMeta) bool { return businessService[c.Service] },
		))),
		grpc.MaxRecvMsgSize(int(cfg.HTTP.MaxBodyBytes)),
	}
	if !tracingOff {
		grpcOpts = append(grpcOpts, grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithTracerProvider(o.tracerProvider),
			otelgrpc.WithPropagators(propagator),
			// Call metrics come from the Prometheus interceptors.
			otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		)))
	}
	s.grpc = grpc.NewServer(grpcOpts...)
	channel := newInprocChannel(chain)
	for _, svc := range services {
		s.grpc.RegisterService(svc.desc, svc.impl)
		channel.RegisterService(svc.desc, svc.impl)
	}
	healthpb.RegisterHealthServer(s.grpc, healthService{Server: s.health.grpc, stop: s.stopWatch})
	if cfg.GRPC.Reflection {
		reflection.Register(s.grpc)
	}
	m.InitializeServer(s.grpc)

	gw, routes, err := newGateway(ctx, channel)
	if err != nil {
		return nil, err
	}
	guarded, err := restHandler(gw, routes, cfg.HTTP.MaxBodyBytes, cfg.Compression.MinBytes)
	if err != nil {
		return nil, err
	}
	rest := guarded
	if !tracingOff {
		rest = otelhttp.NewHandler(guarded, "rest",
			otelhttp.WithTracerProvider(o.tracerProvider),
			otelhttp.WithPropagators(propagator),
			otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
			otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
				if route := routes.template(r.Method, r.URL.Path); route != "" {
					return r.Method + " " + route
				}
				return r.Method
			}),
		)
	}
	s.http = &http.Server{
		Handler:           s.httpHandler(rest, registry),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// registerCollectors registers the collectors beyond the call metrics: the
// in-flight gauge, the database pool, the Go runtime and the process.
func registerCollectors(reg prometheus.Registerer, st *store.Store, inflight *concurrency.Limiter) error {
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sheba_inflight_requests",
			Help: "Business requests running now (REST and gRPC together).",
		}, func() float64 { return float64(inflight.InFlight()) }),
		st.PoolCollector(),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Serve serves gRPC on grpcLis and HTTP on httpLis until ctx is done, then
// shuts down gracefully (contract §7): readiness turns false, the drain delay
// passes, the listeners close, and in-flight requests finish, all within
// shutdown.timeout. It returns an error if a listener failed or the shutdown
// ran out of time.
func (s *Server) Serve(ctx context.Context, grpcLis, httpLis net.Listener) error {
	// The checker outlives ctx: readiness must stay false while draining.
	healthCtx, stopHealth := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHealth()
	go s.health.run(healthCtx)

	errc := make(chan error, 2)
	go func() { errc <- s.grpc.Serve(grpcLis) }()
	go func() {
		if err := s.http.Serve(httpLis); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
			return
		}
		errc <- nil
	}()
	s.log.InfoContext(ctx, "serving", "grpc_addr", grpcLis.Addr().String(), "http_addr", httpLis.Addr().String())

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
		serveErr = fmt.Errorf("serve: %w", serveErr)
	}
	return errors.Join(serveErr, s.shutdown())
}

func (s *Server) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Shutdown.Timeout)
	defer cancel()
	s.log.Info("shutting down", "drain_delay", s.cfg.Shutdown.DrainDelay.String(), "timeout", s.cfg.Shutdown.Timeout.String())
	s.health.shutdown()

	// Load balancers see the failing readiness before the listeners close.
	select {
	case <-time.After(s.cfg.Shutdown.DrainDelay):
	case <-ctx.Done():
	}
	close(s.stopWatch)

	grpcDone := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(grpcDone)
	}()
	httpErr := s.http.Shutdown(ctx)
	select {
	case <-grpcDone:
	case <-ctx.Done():
		s.grpc.Stop()
		<-grpcDone
	}
	if ctx.Err() != nil {
		_ = s.http.Close()
		return fmt.Errorf("shutdown: in-flight requests cut after %s", s.cfg.Shutdown.Timeout)
	}
	if httpErr != nil {
		return fmt.Errorf("shutdown http: %w", httpErr)
	}
	s.log.Info("shut down")
	return nil
}
