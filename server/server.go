package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/fullstorydev/grpchan/inprocgrpc"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/concurrency"
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
}

// Option configures a Server.
type Option func(*options)

// WithHealthInterval sets how often the database is pinged for health
// (default 2s).
func WithHealthInterval(d time.Duration) Option {
	return func(o *options) { o.healthInterval = d }
}

// New builds a Server from cfg. It does not connect anywhere: the database
// may be down at start, and the server then starts not ready.
func New(ctx context.Context, cfg config.Config, st *store.Store, log *slog.Logger, opts ...Option) (*Server, error) {
	o := options{healthInterval: 2 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
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
	names := make([]string, len(services))
	for i, svc := range services {
		names[i] = svc.desc.ServiceName
	}

	s := &Server{
		cfg:       cfg,
		log:       log,
		health:    newHealthChecker(st.Ping, o.healthInterval, names),
		stopWatch: make(chan struct{}),
	}

	chain, err := unaryChain(cfg, chainDeps{
		log:      log,
		inflight: concurrency.NewLimiter(cfg.Limits.MaxInflight),
		hook:     o.hook,
	})
	if err != nil {
		return nil, err
	}
	s.grpc = grpc.NewServer(
		grpc.UnaryInterceptor(chain),
		grpc.MaxRecvMsgSize(int(cfg.HTTP.MaxBodyBytes)),
	)
	channel := (&inprocgrpc.Channel{}).WithServerUnaryInterceptor(chain)
	for _, svc := range services {
		s.grpc.RegisterService(svc.desc, svc.impl)
		channel.RegisterService(svc.desc, svc.impl)
	}
	healthpb.RegisterHealthServer(s.grpc, healthService{Server: s.health.grpc, stop: s.stopWatch})
	if cfg.GRPC.Reflection {
		reflection.Register(s.grpc)
	}

	gw, err := newGateway(ctx, channel)
	if err != nil {
		return nil, err
	}
	s.http = &http.Server{
		Handler:           s.httpHandler(gw),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return s, nil
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
