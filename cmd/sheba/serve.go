package main

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
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/interceptors/apikey"
	"github.com/shebasvc/sheba/interceptors/concurrency"
	"github.com/shebasvc/sheba/interceptors/drain"
	"github.com/shebasvc/sheba/interceptors/idempotency"
	"github.com/shebasvc/sheba/interceptors/metrics"
	"github.com/shebasvc/sheba/interceptors/tracing"
	"github.com/shebasvc/sheba/server"
	"github.com/shebasvc/sheba/server/gateway"
	"github.com/shebasvc/sheba/server/health"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/webhooks"
)

// service is sheba assembled: the services, the chain, both servers and the
// health checker, each built from its own config section. It owns start and
// shutdown.
type service struct {
	log      *slog.Logger
	rate     rateLimits
	shutdown config.Shutdown
	health   *health.Checker
	streams  *drain.Drainer
	grpc     *grpc.Server
	http     *http.Server
	// reapKeys deletes expired idempotency records until its context ends.
	reapKeys func(ctx context.Context)
	webhooks *webhooks.Runner
}

// serviceDeps are the parts of a service that do not come from the config.
type serviceDeps struct {
	store *store.Store
	// pool is the store's pool, on which the webhook queue (River) works.
	pool *pgxpool.Pool
	// webhookOptions, if set, changes the webhook runner's options (tests
	// shorten its intervals).
	webhookOptions func(*webhooks.Options)
	// healthStore is what the health check pings: a pool of its own, so
	// that a saturated business pool does not look like a database that
	// is down. Nil means store.
	healthStore *store.Store
	// tracerProvider gets the spans of every call; nil means no tracing.
	tracerProvider trace.TracerProvider
	// healthInterval is how often the database is pinged (default 2s).
	healthInterval time.Duration
	// hook, if set, runs around every handler, inside the whole chain
	// (tests count, slow down or break handlers with it).
	hook func(ctx context.Context, method string) error
}

// newService builds every part of sheba from cfg. It connects nowhere: the
// database may be down at start, and the service then starts not ready.
func newService(ctx context.Context, cfg config.Config, log *slog.Logger, d serviceDeps) (*service, error) {
	if d.healthInterval == 0 {
		d.healthInterval = 2 * time.Second
	}
	if d.healthStore == nil {
		d.healthStore = d.store
	}
	// With tracing off, the instrumentation is left out rather than run
	// against a no-op provider: it allocates on every call all the same.
	if _, off := d.tracerProvider.(tracenoop.TracerProvider); off {
		d.tracerProvider = nil
	}
	if cfg.Paging.Secret == "" {
		log.Warn("paging.secret is not set: page tokens are signed with a random key of this process, so they fail on other replicas and after a restart (docs/configuration.md#paging)")
	}
	// Each service has its own registry, served at GET /metrics.
	registry := prometheus.NewRegistry()
	hooks, err := newWebhooks(cfg.Webhooks, d, log, registry)
	if err != nil {
		return nil, err
	}
	services, err := server.New(d.store, server.Options{
		Log:                  log,
		PageTokenKey:         cfg.Paging.Key(),
		Events:               hooks,
		AllowPrivateWebhooks: cfg.Webhooks.AllowPrivateNetworks,
	})
	if err != nil {
		return nil, err
	}
	checker := health.NewChecker(d.healthStore.Ping, d.healthInterval, server.ServiceNames())

	m, err := metrics.New(registry, server.Methods())
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	inflight := newInflightLimiter(cfg.Limits)
	if err := registerCollectors(registry, d.store.PoolCollector(), inflight); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	authn, keyIDs, err := newAuthenticator(cfg.Auth, m)
	if err != nil {
		return nil, err
	}
	rate, err := newRateLimits(cfg.Limits, cfg.Redis, keyIDs, log, d.tracerProvider)
	if err != nil {
		return nil, err
	}
	if rate.backend != nil {
		if err := registry.Register(rate.backend.Collector()); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	chain := unaryChain(chainDeps{
		limits:     cfg.Limits,
		authn:      authn,
		keyIDs:     keyIDs,
		log:        log,
		rate:       rate,
		inflight:   inflight,
		metrics:    m,
		dbUp:       checker.DatabaseUp,
		needsDB:    server.DatabaseMethods(),
		keys:       d.store,
		idempotent: server.IdempotentMethods(),
		keyTTL:     cfg.Idempotency.TTL,
		hook:       d.hook,
	})

	streams := drain.New()
	grpcServer := newGRPCServer(cfg, chain, streams, d.tracerProvider)
	services.Register(grpcServer)
	healthpb.RegisterHealthServer(grpcServer, checker.Service())
	if cfg.GRPC.Reflection {
		reflection.Register(grpcServer)
	}
	m.InitializeServer(grpcServer)

	channel := gateway.NewChannel(chain)
	services.Register(channel)
	rest, err := gateway.New(ctx, channel, gateway.Options{
		MaxBodyBytes:        cfg.HTTP.MaxBodyBytes,
		MaxConcurrentBodies: cfg.HTTP.MaxConcurrentBodies,
		CompressMinBytes:    cfg.Compression.MinBytes,
		TracerProvider:      d.tracerProvider,
	})
	if err != nil {
		return nil, err
	}
	handler := gateway.Handler(rest, gateway.Operator{
		Ready: checker,
		Metrics: promhttp.HandlerFor(registry, promhttp.HandlerOpts{
			// OpenMetrics carries the exemplars (trace ids) of the histograms.
			EnableOpenMetrics: true,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		}),
	})
	return &service{
		log:      log,
		rate:     rate,
		shutdown: cfg.Shutdown,
		health:   checker,
		streams:  streams,
		grpc:     grpcServer,
		http:     newHTTPServer(cfg.HTTP, handler, log),
		reapKeys: func(ctx context.Context) {
			idempotency.Reap(ctx, d.store, idempotency.ReapInterval(cfg.Idempotency.TTL), log)
		},
		webhooks: hooks,
	}, nil
}

// newWebhooks builds the webhook runner (docs/webhooks.md) from the
// webhooks section.
func newWebhooks(c config.Webhooks, d serviceDeps, log *slog.Logger, reg prometheus.Registerer) (*webhooks.Runner, error) {
	o := webhooks.Options{
		Timeout:                c.Timeout,
		MaxAttempts:            c.MaxAttempts,
		BackoffBase:            c.Backoff.Base,
		BackoffMax:             c.Backoff.Max,
		PerEndpointConcurrency: c.PerEndpointConcurrency,
		AllowPrivateNetworks:   c.AllowPrivateNetworks,
		Log:                    log,
		TracerProvider:         d.tracerProvider,
		Registerer:             reg,
	}
	if d.webhookOptions != nil {
		d.webhookOptions(&o)
	}
	return webhooks.New(d.pool, d.store, o)
}

// newAuthenticator parses the configured key hashes, once, into the API-key
// check; it returns the key ids too, for the per-key limits.
func newAuthenticator(c config.Auth, m *metrics.Metrics) (*apikey.Authenticator, []string, error) {
	keys := make([]apikey.Key, len(c.Keys))
	ids := make([]string, len(c.Keys))
	for i, k := range c.Keys {
		key, err := apikey.ParseKey(k.ID, k.SHA256)
		if err != nil {
			return nil, nil, fmt.Errorf("auth.keys[%d]: %w", i, err)
		}
		keys[i], ids[i] = key, k.ID
	}
	return apikey.New(keys, c.Public, apikey.WithOnReject(m.Rejected(metrics.ReasonUnauthenticated))), ids, nil
}

// newGRPCServer returns the grpc.Server with the chain on the sheba.v1
// services, messages bounded to http.max_body_bytes, the limits of
// grpcLimits, every stream ended by streams at shutdown, and a span per call
// when tp is not nil.
func newGRPCServer(cfg config.Config, chain grpc.UnaryServerInterceptor, streams *drain.Drainer, tp trace.TracerProvider) *grpc.Server {
	business := map[string]bool{}
	for _, name := range server.ServiceNames() {
		business[name] = true
	}
	opts := []grpc.ServerOption{
		// The chain is for business calls only: grpc.health.v1 (and
		// reflection) answer without a key, limits or shedding, like the
		// operator endpoints on HTTP, so probes work under any load.
		grpc.UnaryInterceptor(selector.UnaryServerInterceptor(chain, selector.MatchFunc(
			func(_ context.Context, c interceptors.CallMeta) bool { return business[c.Service] },
		))),
		// Streams (health Watch, reflection) never end by themselves:
		// shutdown ends them so that the drain can finish.
		grpc.StreamInterceptor(streams.StreamServerInterceptor()),
		grpc.MaxRecvMsgSize(int(cfg.HTTP.MaxBodyBytes)),
	}
	opts = append(opts, grpcLimits(cfg.GRPC, cfg.Limits.Timeout)...)
	if tp != nil {
		opts = append(opts, grpc.StatsHandler(tracing.NewServerHandler(tp)))
	}
	return grpc.NewServer(opts...)
}

// healthPingTimeout is the statement timeout of the health check's
// connection: the check gives each ping its interval at most (2 s).
const healthPingTimeout = 2 * time.Second

// maxHeaderBytes bounds the headers of an HTTP request and the metadata of a
// gRPC call alike (grpc-go's default is 16 MiB).
const maxHeaderBytes = 64 << 10

// grpcLimits are the connection limits of the gRPC server
// (docs/operations.md#slow-clients):
//
//   - grpc.max_concurrent_streams: a connection carries at most that many
//     calls at once. grpc-go's default is no limit, which also turns off its
//     cap on HTTP/2 rapid resets (it is derived from this value).
//   - metadata of a call at most 64 KiB, like HTTP headers.
//   - keepalive enforcement: a client may ping every 10 s at most (grpc-go's
//     default of 5 min closes clients that use the common 10–60 s keepalive
//     settings with too_many_pings), also with no call open, so an idle but
//     kept-alive connection survives; one that pings faster is closed.
//   - a connection is closed gracefully after about 30 min (grpc-go adds
//     ±10% jitter), so clients spread over new replicas after a scale-up;
//     its calls get the longest business deadline (limits.timeout) plus 5 s
//     to finish, so no call is cut by it.
//   - the server pings a connection idle for 1 min and closes it if no
//     answer comes within 20 s, so a vanished client does not hold its
//     streams.
func grpcLimits(c config.GRPC, callTimeout time.Duration) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(uint32(c.MaxConcurrentStreams)),
		grpc.MaxHeaderListSize(maxHeaderBytes),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             10 * time.Second,
			PermitWithoutStream: true,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionAge:      30 * time.Minute,
			MaxConnectionAgeGrace: callTimeout + 5*time.Second,
			Time:                  time.Minute,
			Timeout:               20 * time.Second,
		}),
	}
}

// newHTTPServer returns the HTTP server of the REST gateway and the
// operator endpoints, with the read deadlines of c: a client that sends its
// headers or its whole request too slowly is cut
// (docs/operations.md#slow-clients).
func newHTTPServer(c config.HTTP, h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// registerCollectors registers the collectors beyond the call metrics: the
// in-flight gauge, the database pool, the Go runtime and the process.
func registerCollectors(reg prometheus.Registerer, pool prometheus.Collector, inflight concurrency.Limiter) error {
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sheba_inflight_requests",
			Help: "Business requests running now (REST and gRPC together).",
		}, func() float64 { return float64(inflight.InFlight()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sheba_inflight_limit",
			Help: "Business requests allowed to run at once now: limits.max_inflight, or the adaptive limit.",
		}, func() float64 { return float64(inflight.Limit()) }),
		pool,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// serve serves gRPC on grpcLis and HTTP on httpLis until ctx is done, then
// shuts down gracefully (docs/operations.md#graceful-shutdown): readiness turns
// false, the drain delay passes, the listeners close, and in-flight
// requests finish, all within shutdown.timeout. It returns an error if a
// listener failed or the shutdown ran out of time.
func (s *service) serve(ctx context.Context, grpcLis, httpLis net.Listener) error {
	// The checker outlives ctx: readiness must stay false while draining.
	healthCtx, stopHealth := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHealth()
	go s.health.Run(healthCtx)
	// The reaper stops with ctx, and is waited for: the pool it uses
	// closes after serve returns.
	reapCtx, stopReap := context.WithCancel(ctx)
	reaped := make(chan struct{})
	go func() {
		defer close(reaped)
		s.reapKeys(reapCtx)
	}()
	defer func() {
		stopReap()
		<-reaped
	}()

	// Webhook deliveries stop beside the servers, within the same bound:
	// attempts in flight get half of it to finish, and whatever is left
	// waits in the queue for any replica.
	hooksCtx, stopHooks := context.WithCancel(context.WithoutCancel(ctx))
	hooksDone := make(chan error, 1)
	go func() { hooksDone <- s.webhooks.Run(hooksCtx, s.shutdown.Timeout/2) }()
	defer func() {
		if err := <-hooksDone; err != nil {
			s.log.Warn("stopping webhook deliveries", "error", err)
		}
	}()

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
	stopHooks()
	return errors.Join(serveErr, s.stop())
}

// stop drains and stops both servers within shutdown.timeout.
func (s *service) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.shutdown.Timeout)
	defer cancel()
	// Last, when no request is left to decide a rate limit.
	defer func() {
		if err := s.rate.close(); err != nil {
			s.log.Warn("closing the redis client", "error", err.Error())
		}
	}()
	s.log.Info("shutting down", "drain_delay", s.shutdown.DrainDelay.String(), "timeout", s.shutdown.Timeout.String())
	s.health.Shutdown()

	// Load balancers see the failing readiness before the listeners close.
	select {
	case <-time.After(s.shutdown.DrainDelay):
	case <-ctx.Done():
	}
	s.health.EndWatches()
	// Reflection streams (and any other) do not watch the health server:
	// they are ended here, every unary call still running to its end.
	s.streams.End()

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
		return fmt.Errorf("shutdown: in-flight requests cut after %s", s.shutdown.Timeout)
	}
	if httpErr != nil {
		return fmt.Errorf("shutdown http: %w", httpErr)
	}
	s.log.Info("shut down")
	return nil
}
