package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/interceptors/apikey"
	"github.com/shebasvc/sheba/interceptors/concurrency"
	"github.com/shebasvc/sheba/interceptors/drain"
	"github.com/shebasvc/sheba/interceptors/hook"
	"github.com/shebasvc/sheba/interceptors/idempotency"
	"github.com/shebasvc/sheba/interceptors/metrics"
	"github.com/shebasvc/sheba/interceptors/tracing"
	"github.com/shebasvc/sheba/internal/certreload"
	"github.com/shebasvc/sheba/server"
	"github.com/shebasvc/sheba/server/gateway"
	"github.com/shebasvc/sheba/server/health"
	"github.com/shebasvc/sheba/server/loginthrottle"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/webhooks"
	"github.com/shebasvc/sheba/webhooks/eventlog"
)

// App is sheba assembled: the database pools, the services, the chain,
// both servers, the health checker and the webhook runner, each built from
// its own config section. It owns start and shutdown. Build it with New,
// then call Serve or ListenAndServe once.
type App struct {
	cfg   config.Config
	log   *slog.Logger
	flush func(context.Context) error // sends the buffered spans
	// pool is the business pool (the store's); hooksPool is the webhook
	// queue's (River's and its workers'); healthPool is the health check's
	// own connection.
	pool, hooksPool, healthPool *pgxpool.Pool
	// listenPool holds the one connection on which the event hub listens
	// for new events (LISTEN sheba_events).
	listenPool *pgxpool.Pool
	// events follows the event log for the event streams
	// (docs/events.md).
	events  *eventlog.Hub
	store   *store.Store
	rate    rateLimits
	health  *health.Checker
	streams *drain.Drainer
	grpc    *grpc.Server
	// browser serves the browser protocols (Connect, gRPC-Web) on
	// http.addr, through its ServeHTTP.
	browser  *grpc.Server
	http     *http.Server
	webhooks *webhooks.Runner
	// hook is the external hook's client (nil: no hook).
	hook hook.Client
	// operator serves operator.addr, with operatorGRPC (grpc.health.v1
	// alone) behind it; both nil when operator.addr is empty.
	operator     *http.Server
	operatorGRPC *grpc.Server
	// certs serves the TLS certificate of both listeners, re-read when its
	// files change; nil when tls.cert_file is empty.
	certs *certreload.Reloader
	// guards bound and count the connections of each listener.
	guards struct{ grpc, http, operator *listenerGuard }

	// conns knows the connections of both pools, for a shutdown that must
	// cut their queries.
	conns store.Canceler
	// failover follows the primary in the three pools on database.url
	// (docs/operations.md#postgres-cluster).
	failover *store.Failover

	// standby is the read-only methods' pool on database.read_url (nil
	// when it is not set).
	standby *store.Standby
}

// New builds every part of sheba from cfg, which must be valid
// (config.Load validates it). It connects nowhere: the database may be
// down at start, and the service then starts not ready.
func New(ctx context.Context, cfg config.Config, log *slog.Logger, opts ...Option) (_ *App, err error) {
	o := evaluateOptions(opts)
	for _, w := range cfg.Warnings() {
		log.WarnContext(ctx, w)
	}
	tp, flush := o.tracerProvider, func(context.Context) error { return nil }
	if tp == nil {
		if tp, flush, err = newTracerProvider(ctx, o.lookup, o.version); err != nil {
			return nil, fmt.Errorf("tracing: %w", err)
		}
	}
	a := &App{cfg: cfg, log: log, flush: flush, failover: store.NewFailover(log)}
	defer func() {
		if err != nil {
			a.close()
		}
	}()
	// No query outlives the longest request, nor does a transaction stay
	// idle that long between its statements: nothing waits while it holds
	// a transaction (docs/operations.md#slow-database).
	if a.pool, err = store.OpenPool(ctx, cfg.Database.URL, cfg.Database.MaxConns, tp,
		store.WithStatementTimeout(cfg.Limits.Timeout), store.WithIdleInTransactionTimeout(cfg.Limits.Timeout),
		store.WithCanceler(&a.conns), store.WithFailover(a.failover)); err != nil {
		return nil, err
	}
	// The health check has a connection of its own: a busy business pool
	// must not make its ping wait in the pool's queue, and the replica look
	// down when the database is only slow. Its pings are not traced. A ping
	// that times out is cancelled like any query, keeping the connection: a
	// new one costs several round trips and the authentication, which on a
	// loaded machine can outlast the next ping's deadline too.
	if a.healthPool, err = store.OpenPool(ctx, cfg.Database.URL, 1, tracenoop.NewTracerProvider(),
		store.WithStatementTimeout(healthPingTimeout), store.WithCanceler(&a.conns), store.WithFailover(a.failover)); err != nil {
		return nil, err
	}
	// The webhook queue and its workers have a pool of their own, so that
	// deliveries never take the connections of API requests, however many
	// there are to make. Its queries are not traced: River polls the queue
	// every second, each poll a trace of its own.
	if a.hooksPool, err = store.OpenPool(ctx, cfg.Database.URL, cfg.Webhooks.DatabaseMaxConns, tracenoop.NewTracerProvider(),
		store.WithCanceler(&a.conns), store.WithFailover(a.failover)); err != nil {
		return nil, err
	}
	// The event hub keeps one connection listening for new events: in a
	// pool of its own, so that it never takes one of the API's, nor waits
	// behind them. Not traced: it waits, it does not query; and its wait
	// is cut at once when the hub stops, not cancelled.
	if a.listenPool, err = store.OpenPool(ctx, cfg.Database.URL, 1, tracenoop.NewTracerProvider(),
		store.WithCutOnCancel(), store.WithCanceler(&a.conns), store.WithFailover(a.failover)); err != nil {
		return nil, err
	}
	if a.standby, err = openStandby(ctx, cfg, tp, &a.conns); err != nil {
		return nil, err
	}
	a.store = store.New(a.pool)
	// The hub reads the log on the API's primary pool (a stream never
	// reads a standby, which could lag behind an event).
	a.events = eventlog.New(a.store, a.listenPool, eventlog.Options{
		Buffer:    cfg.Events.Buffer,
		Retention: cfg.Events.Retention,
		Failover:  a.failover,
		Log:       log,
	})
	// With tracing off, the instrumentation is left out rather than run
	// against a no-op provider: it allocates on every call all the same.
	if _, off := tp.(tracenoop.TracerProvider); off {
		tp = nil
	}
	if err := a.build(ctx, o, tp); err != nil {
		return nil, err
	}
	return a, nil
}

// build makes the parts that serve: the services, the chain and both
// servers.
func (a *App) build(ctx context.Context, o options, tp trace.TracerProvider) error {
	cfg, log := a.cfg, a.log
	// Each service has its own registry, served at GET /metrics.
	registry := prometheus.NewRegistry()
	var err error
	if a.webhooks, err = newWebhooks(cfg.Webhooks, cfg.Events.Retention, a.hooksPool, o, log, tp, registry); err != nil {
		return err
	}
	// Closed by close, with the rest of a.rate.
	if a.rate.backend, err = newRedisBackend(cfg.Limits, cfg.Redis, log, tp); err != nil {
		return err
	}
	logins := loginthrottle.New(cfg.Limits.LoginFailures.Max, cfg.Limits.LoginFailures.Window,
		loginthrottle.WithMaxAll(cfg.Limits.LoginFailures.MaxAll), loginthrottle.WithRedis(a.rate.backend))
	if err := registry.Register(logins.Collector()); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	sm, err := newStreamMetrics(registry)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	services, err := server.New(a.store, server.Options{
		Log:                  log,
		PageTokenKey:         cfg.Paging.Key(),
		Events:               a.webhooks,
		AllowPrivateWebhooks: cfg.Webhooks.AllowPrivateNetworks,
		WebhookResolver:      o.resolver,
		MaxWebhookEndpoints:  cfg.Webhooks.MaxEndpoints,
		WebhookSecretOverlap: cfg.Webhooks.SecretOverlap,
		Logins:               logins,
		EventStream: server.EventOptions{
			Hub:         a.events,
			Heartbeat:   cfg.Events.Heartbeat,
			MaxDuration: cfg.Events.MaxDuration,
			OpenTimeout: cfg.Limits.Timeout,
			OnEvent:     sm.events.Inc,
		},
	})
	if err != nil {
		return err
	}
	a.health = health.NewChecker(store.New(a.healthPool).Ping, o.healthInterval, server.ServiceNames())

	m, err := metrics.New(registry, server.Methods())
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	m.ServerStreams(server.StreamingMethods()...)
	inflight := newInflightLimiter(cfg.Limits)
	if err := registerCollectors(registry, store.PoolCollector(a.databasePools()), a.failover.Collector(), inflight, a.health); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	authn, keyIDs, err := newAuthenticator(cfg.Auth, m)
	if err != nil {
		return err
	}
	a.rate = newRateLimits(cfg.Limits, a.rate.backend, keyIDs)
	if a.rate.backend != nil {
		if err := registry.Register(a.rate.backend.Collector()); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	fpKey, err := fingerprintKey(cfg.Paging)
	if err != nil {
		return fmt.Errorf("idempotency: %w", err)
	}
	validator, err := newValidator()
	if err != nil {
		return err
	}
	// A request the hook puts in place of the call's holds to the same
	// constraints.
	hookLink, hookClient, err := newHook(cfg.Hook, checker(validator, log), log, tp, registry)
	if err != nil {
		return err
	}
	a.hook = hookClient
	standbyLink, needsDB, err := newStandbyLink(a.standby, cfg.Database, keyIDs, a.health.DatabaseUp, log, registry)
	if err != nil {
		return err
	}
	deps := chainDeps{
		limits:     cfg.Limits,
		authn:      authn,
		keyIDs:     keyIDs,
		log:        log,
		rate:       a.rate,
		inflight:   inflight,
		metrics:    m,
		validator:  validator,
		dbUp:       a.health.DatabaseUp,
		needsDB:    needsDB,
		keys:       a.store,
		idempotent: server.IdempotentMethods(),
		keyTTL:     cfg.Idempotency.TTL,
		// paging.secret is the secret every replica shares already.
		fingerprintKey: fpKey,
		hook:           hookLink,
		standby:        standbyLink,
		extra:          o.interceptors,
	}
	chain := unaryChain(deps)
	// The chain's stream side: a stream opens through the same links.
	streams := newStreamOpening(deps, eventsLimits{maxStreams: cfg.Events.MaxStreams, maxPerKey: cfg.Events.MaxStreamsPerKey}, sm)

	if a.certs, err = newCerts(cfg.TLS, log, registry); err != nil {
		return err
	}
	conns, err := newConnMetrics(registry)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	maxConns, tls := cfg.Limits.MaxConnections, a.certs != nil
	a.guards.grpc = newListenerGuard(listenerGRPC, maxConns, cfg.GRPC.MaxConcurrentStreams, tls, conns, log)
	a.guards.http = newListenerGuard(listenerHTTP, maxConns, httpMaxStreams, tls, conns, log)
	a.streams = drain.New()
	// The key checked before the message is read (tap.go).
	a.grpc = newGRPCServer(cfg, tp, cfg.GRPC.MaxRecvBytes,
		grpc.InTapHandle(authTap(authn, server.Methods(), m, log)),
		grpc.Creds(newGRPCCreds(a.certs, a.guards.grpc)),
		// The streams that need no key (health Watch, reflection) count
		// against one bound over every connection, before the drain's
		// goroutine; the business streams (StreamEvents) open through the
		// chain instead, with limits of their own (events.max_streams,
		// events.max_streams_per_key). Then the drain, which ends every
		// stream at shutdown.
		grpc.ChainStreamInterceptor(
			streams.StreamServerInterceptor(concurrency.StreamServerInterceptor(concurrency.NewLimiter(cfg.GRPC.MaxOpenStreams))),
			a.streams.StreamServerInterceptor()))
	services.RegisterChained(o.registrar(a.grpc), chain)
	healthpb.RegisterHealthServer(a.grpc, a.health.Service())
	if cfg.GRPC.Reflection {
		reflection.Register(a.grpc)
	}
	m.InitializeServer(a.grpc)

	// The browser protocols' own grpc.Server: the same chain, services and
	// options, served only through its ServeHTTP (gateway.Options.GRPC).
	// Not a.grpc itself, because GracefulStop ends such calls at once
	// (grpc-go drains a ServeHTTP call by closing it): this one stops after
	// the HTTP server has let its requests finish (stopServers).
	//
	// Its messages come from the gateway's body reader, which holds a body
	// as sent to grpc.max_recv_bytes (or http.max_body_bytes, if smaller);
	// transcoded from JSON, a message may grow a little, and is not refused
	// for that (no bound in its codec).
	a.browser = newGRPCServer(cfg, tp, 0, grpc.ChainStreamInterceptor(
		streams.StreamServerInterceptor(nil), a.streams.StreamServerInterceptor()))
	services.RegisterChained(o.registrar(a.browser), chain)

	channel := gateway.NewChannel(nil)
	services.RegisterChained(o.registrar(channel), chain)
	// Its unary calls pass the chain with the request the gateway decoded.
	channel.UnaryThrough(chain)
	// A REST stream opens through the chain's stream side (so a call
	// without a key is 401, and the stream limits hold), then runs behind
	// the drain, as on the gRPC servers.
	channel.StreamThrough(streams.StreamServerInterceptor(nil), a.streams.StreamServerInterceptor())
	rest, err := gateway.New(ctx, channel, gateway.Options{
		MaxBodyBytes:        cfg.HTTP.MaxBodyBytes,
		MaxConcurrentBodies: cfg.HTTP.MaxConcurrentBodies,
		WriteTimeout:        cfg.HTTPWriteTimeout(),
		CompressMinBytes:    cfg.Compression.MinBytes,
		TracerProvider:      tp,
		// The hook is told of the REST request, and adds headers to its
		// answer.
		ShareRequest: hookLink != nil,
		// The chain's own key check, so that REST reads no body the chain
		// would refuse.
		Authenticator: authn,
		GRPC:          a.browser,
		// The seam between the two ways of serving the browser
		// protocols (browserByConnect).
		ConnectHandlers: o.connectHandlers,
		Codec:           server.Codec(0),
		AllowedOrigins:  cfg.HTTP.CORS.AllowedOrigins,
		// A browser call's message, as a gRPC message is bounded, with
		// its repeated fields bounded before it is unmarshalled.
		MaxMessageBytes: int64(cfg.GRPC.MaxRecvBytes),
		RepeatedBounds:  server.RepeatedBounds(),
	})
	if err != nil {
		return err
	}
	op := gateway.Operator{
		Ready: a.health,
		Metrics: promhttp.HandlerFor(registry, promhttp.HandlerOpts{
			// OpenMetrics carries the exemplars (trace ids) of the histograms.
			EnableOpenMetrics: true,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		}),
		Elsewhere: cfg.Operator.Addr != "",
	}
	a.http = newHTTPServer(cfg, gateway.Handler(rest, op), a.guards.http, log)
	if a.certs != nil {
		a.http.TLSConfig = a.certs.ServerConfig("h2", "http/1.1")
	}
	if op.Elsewhere {
		// No caller of the operator port is authenticated: a health
		// request is a few bytes, and that is all it takes. Its Watch
		// streams have a bound of their own, as on grpc.addr: the port
		// needs no key either, and a flood of them there must not refuse
		// the watchers of grpc.addr, nor the other way round.
		a.operatorGRPC = grpc.NewServer(grpc.MaxRecvMsgSize(operatorMaxMessage),
			grpc.StreamInterceptor(concurrency.StreamServerInterceptor(concurrency.NewLimiter(cfg.GRPC.MaxOpenStreams))))
		healthpb.RegisterHealthServer(a.operatorGRPC, a.health.Service())
		// Plaintext HTTP/2 (h2c) for the kubelet's grpc probe, HTTP/1.1
		// for its httpGet ones; few streams a connection, and a scrape
		// that stops reading is cut.
		a.guards.operator = newListenerGuard(listenerOperator, maxConns, operatorMaxStreams, false, conns, log)
		a.operator = newHTTPServer(cfg, gateway.OperatorHandler(op, a.operatorGRPC), a.guards.operator, log)
		a.operator.Protocols = new(http.Protocols)
		a.operator.Protocols.SetHTTP1(true)
		a.operator.Protocols.SetUnencryptedHTTP2(true)
		a.operator.WriteTimeout = operatorWriteTimeout
	}
	return nil
}

// Handler is the HTTP handler of http.addr: the REST gateway and the
// operator endpoints.
func (a *App) Handler() http.Handler { return a.http.Handler }

// ServiceInfo describes the services on the gRPC server, as
// grpc.Server.GetServiceInfo does.
func (a *App) ServiceInfo() map[string]grpc.ServiceInfo { return a.grpc.GetServiceInfo() }

// newWebhooks builds the webhook runner (docs/webhooks.md) from the
// webhooks section, on pool, the queue's own, with the resolver of opts;
// its webhook options, if any, change the runner's options last. The cap on
// attempts in flight to an endpoint is the runner's own default, leases in
// Postgres on pool shared by every replica: never in Redis, whose outage
// could not fall back without exceeding it
// (docs/webhooks.md#protecting-a-failing-endpoint).
func newWebhooks(c config.Webhooks, retention time.Duration, pool *pgxpool.Pool, opts options, log *slog.Logger, tp trace.TracerProvider, reg prometheus.Registerer) (*webhooks.Runner, error) {
	o := webhooks.Options{
		// The event log is one: the webhooks keep it as long as the event
		// streams may resume in it (events.retention).
		Retention:              retention,
		Timeout:                c.Timeout,
		MaxAttempts:            c.MaxAttempts,
		BackoffBase:            c.Backoff.Base,
		BackoffMax:             c.Backoff.Max,
		PerEndpointConcurrency: c.PerEndpointConcurrency,
		AllowPrivateNetworks:   c.AllowPrivateNetworks,
		Resolver:               opts.resolver,
		Log:                    log,
		TracerProvider:         tp,
		Registerer:             reg,
	}
	if opts.webhookOptions != nil {
		opts.webhookOptions(&o)
	}
	return webhooks.New(pool, store.New(pool), o)
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

// newGRPCServer returns a grpc.Server for the sheba.v1 services, which
// bring the chain themselves (server.Services.RegisterChained), with their
// messages bounded to maxMessage bytes (0: no bound of their own) by
// server.Codec, the limits of grpcLimits, a span per call when tp is not
// nil, and opts: the stream interceptors (health Watch and reflection
// never end by themselves: the drain ends them at shutdown) and, for
// grpc.addr, the key's tap and the credentials. It has no unary
// interceptor: grpc.health.v1 (and reflection) answer without a key,
// limits or shedding, like the operator endpoints on HTTP, so probes work
// under any load.
func newGRPCServer(cfg config.Config, tp trace.TracerProvider, maxMessage int, opts ...grpc.ServerOption) *grpc.Server {
	opts = append(opts,
		// A message over grpc.max_recv_bytes, or with a repeated field
		// over its bound, is refused before it is unmarshalled, by the
		// chain, with its ErrorInfo.
		grpc.ForceServerCodecV2(server.Codec(maxMessage)),
		grpc.MaxRecvMsgSize(grpcReadBound(cfg)),
	)
	opts = append(opts, grpcLimits(cfg.GRPC, cfg.Limits.Timeout)...)
	if tp != nil {
		opts = append(opts, grpc.StatsHandler(tracing.NewServerHandler(tp)))
	}
	return grpc.NewServer(opts...)
}

// grpcReadBound is the most grpc-go reads of a message, compressed or
// not, before the codec sees it: the larger of http.max_body_bytes and
// grpc.max_recv_bytes. grpc.max_recv_bytes is the codec's bound, not
// grpc-go's, because grpc-go answers a message over its own bound by itself
// (RESOURCE_EXHAUSTED, without ErrorInfo), writing its status before the
// call reaches sheba; between the two bounds the chain refuses it with its
// ErrorInfo (docs/api.md#message-size).
func grpcReadBound(cfg config.Config) int {
	return int(max(cfg.HTTP.MaxBodyBytes, int64(cfg.GRPC.MaxRecvBytes)))
}

// newGRPCCreds returns the credentials of grpc.addr: TLS only when certs is
// not nil (a plaintext connection fails its handshake), else none; either
// way each connection watched by guard.
func newGRPCCreds(certs *certreload.Reloader, guard *listenerGuard) credentials.TransportCredentials {
	creds := insecure.NewCredentials()
	if certs != nil {
		creds = credentials.NewTLS(certs.ServerConfig("h2"))
	}
	return grpcCreds{TransportCredentials: creds, guard: guard}
}

// httpMaxStreams is the HTTP/2 streams a connection to http.addr may have
// open: net/http's default, said here because the reset budget is derived
// from it.
const httpMaxStreams = 250

// grpcConnectionTimeout is the time a gRPC connection has to finish its
// TLS handshake and its HTTP/2 preface; a silent one is then closed.
const grpcConnectionTimeout = 10 * time.Second

// The bounds of the operator port, whose callers are probes and scrapers:
// a health request's size, HTTP/2 streams a connection, and the time to
// write an answer (a /metrics page included).
const (
	operatorMaxMessage   = 4 << 10
	operatorMaxStreams   = 16
	operatorWriteTimeout = 10 * time.Second
)

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
//     calls at once. grpc-go's default is no limit, which also turns off
//     the one thing it does against HTTP/2 rapid resets: it runs at most
//     this many handlers of a connection at once, and stops reading it
//     meanwhile. That slows such a client and never stops it; the reset
//     guard of the credentials ends its connection
//     (docs/operations.md#connections-and-streams).
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
//   - a connection that has not finished its TLS handshake and HTTP/2
//     preface within 10 s is closed (grpc-go's default is 120 s), and one
//     with no call open for grpc.max_connection_idle is sent GOAWAY and
//     closed: neither holds a place of limits.max_connections for long.
func grpcLimits(c config.GRPC, callTimeout time.Duration) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(grpcConnectionTimeout),
		grpc.MaxConcurrentStreams(uint32(c.MaxConcurrentStreams)),
		grpc.MaxHeaderListSize(maxHeaderBytes),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             10 * time.Second,
			PermitWithoutStream: true,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     c.MaxConnectionIdle,
			MaxConnectionAge:      config.GRPCMaxConnectionAge,
			MaxConnectionAgeGrace: callTimeout + 5*time.Second,
			Time:                  time.Minute,
			Timeout:               20 * time.Second,
		}),
	}
}

// newHTTPServer returns an HTTP server of h with the deadlines of the http
// section: a client that sends its headers or its whole request too
// slowly, or reads its answer too slowly, is cut
// (docs/operations.md#slow-clients). Its HTTP/2 connections may have the
// guard's streams open, and are watched by guard, which sends GOAWAY to
// one that resets streams faster than it completes calls; guard also
// counts the failed TLS handshakes net/http logs.
func newHTTPServer(cfg config.Config, h http.Handler, guard *listenerGuard, log *slog.Logger) *http.Server {
	c := cfg.HTTP
	return &http.Server{
		Handler:           guard.resets.Handler(h),
		ConnContext:       guard.resets.ConnContext,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		WriteTimeout:      cfg.HTTPWriteTimeout(),
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: guard.maxStreams},
		ErrorLog:          guard.errorLog(log),
	}
}

// registerCollectors registers the collectors beyond the call metrics:
// readiness and the database's health, the in-flight gauge, the database
// pools and failovers, the Go runtime and the process.
func registerCollectors(reg prometheus.Registerer, pool, failovers prometheus.Collector, inflight concurrency.Limiter, h *health.Checker) error {
	up := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	for _, c := range []prometheus.Collector{
		// What /readyz and the health ping say, for alerts
		// (deploy/prometheus/rules.yaml): a scrape sees them where a probe
		// does not keep history.
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sheba_ready",
			Help: "1 while the service is ready (GET /readyz answers 200), else 0.",
		}, func() float64 { return up(h.Ready()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sheba_database_up",
			Help: "1 while Postgres answers the health ping, else 0.",
		}, func() float64 { return up(h.DatabaseUp()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sheba_inflight_requests",
			Help: "Business requests running now (REST and gRPC together).",
		}, func() float64 { return float64(inflight.InFlight()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sheba_inflight_limit",
			Help: "Business requests allowed to run at once now: limits.max_inflight, or the adaptive limit.",
		}, func() float64 { return float64(inflight.Limit()) }),
		pool,
		failovers,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// ListenAndServe listens on grpc.addr and http.addr and serves as Serve
// does.
func (a *App) ListenAndServe(ctx context.Context) error {
	var lc net.ListenConfig
	grpcLis, err := lc.Listen(ctx, "tcp", a.cfg.GRPC.Addr)
	if err != nil {
		a.close()
		return fmt.Errorf("listen grpc.addr: %w", err)
	}
	httpLis, err := lc.Listen(ctx, "tcp", a.cfg.HTTP.Addr)
	if err != nil {
		grpcLis.Close()
		a.close()
		return fmt.Errorf("listen http.addr: %w", err)
	}
	var opLis net.Listener
	if a.operator != nil {
		if opLis, err = lc.Listen(ctx, "tcp", a.cfg.Operator.Addr); err != nil {
			grpcLis.Close()
			httpLis.Close()
			a.close()
			return fmt.Errorf("listen operator.addr: %w", err)
		}
	}
	return a.Serve(ctx, Listeners{GRPC: grpcLis, HTTP: httpLis, Operator: opLis})
}

// Listeners are where Serve serves: grpc.addr, http.addr and, when
// operator.addr is set, operator.addr.
type Listeners struct {
	GRPC, HTTP, Operator net.Listener
}

// Serve serves gRPC on lis.GRPC, HTTP on lis.HTTP and, when operator.addr
// is set (and only then), the operator port on lis.Operator, until ctx is
// done, then shuts down gracefully within shutdown.timeout, everything
// included (shutdown, docs/operations.md#graceful-shutdown). It returns an
// error if a listener failed or the shutdown ran out of time.
func (a *App) Serve(ctx context.Context, lis Listeners) error {
	if (a.operator != nil) != (lis.Operator != nil) {
		for _, l := range []net.Listener{lis.GRPC, lis.HTTP, lis.Operator} {
			if l != nil {
				l.Close()
			}
		}
		a.close()
		return errors.New("serve: an operator listener is needed exactly when operator.addr is set")
	}
	grpcLis, httpLis := a.guards.grpc.listen(lis.GRPC), a.guards.http.listen(lis.HTTP)
	bg := background{
		// The checker outlives ctx: readiness must stay false while
		// draining, and the chain asks it whether the database is up until
		// the servers have stopped.
		health: start(context.WithoutCancel(ctx), a.health.Run),
		reaper: start(ctx, func(ctx context.Context) {
			idempotency.Reap(ctx, a.store, idempotency.ReapInterval(a.cfg.Idempotency.TTL), a.log)
		}),
		// Certificates are followed until the servers have stopped: the
		// listeners accept connections through the drain.
		certs: start(context.WithoutCancel(ctx), func(ctx context.Context) {
			if a.certs != nil {
				a.certs.Run(ctx)
			}
		}),
		// Webhook deliveries stop when the shutdown begins: attempts in
		// flight get half of the bound to finish, the rest of it to record
		// their outcome, and whatever is left waits in the queue for any
		// replica.
		// The event hub runs until the streams have ended (shutdown).
		events: start(context.WithoutCancel(ctx), func(ctx context.Context) {
			if err := a.events.Run(ctx); err != nil && ctx.Err() == nil {
				a.log.Error("event hub stopped", "error", err)
			}
		}),
		hooks: start(context.WithoutCancel(ctx), func(ctx context.Context) {
			if err := a.webhooks.Run(ctx, a.cfg.Shutdown.Timeout/2); err != nil {
				a.log.Warn("stopping webhook deliveries", "error", err)
			}
		}),
	}

	errc := make(chan error, 3)
	go func() { errc <- a.grpc.Serve(grpcLis) }()
	serveHTTP := func(l net.Listener, serve func(net.Listener) error) {
		if err := serve(l); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
			return
		}
		errc <- nil
	}
	if a.certs != nil {
		// HTTPS only, HTTP/2 and HTTP/1.1 by ALPN; the certificate comes
		// from TLSConfig.
		go serveHTTP(httpLis, func(l net.Listener) error { return a.http.ServeTLS(l, "", "") })
	} else {
		go serveHTTP(httpLis, a.http.Serve)
	}
	attrs := []any{"grpc_addr", grpcLis.Addr().String(), "http_addr", httpLis.Addr().String()}
	if a.operator != nil {
		go serveHTTP(a.guards.operator.listen(lis.Operator), a.operator.Serve)
		attrs = append(attrs, "operator_addr", lis.Operator.Addr().String())
	}
	a.log.InfoContext(ctx, "serving", attrs...)

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
		serveErr = fmt.Errorf("serve: %w", serveErr)
	}
	return errors.Join(serveErr, a.shutdown(bg))
}

// browserByConnect chooses how the browser protocols (Connect, gRPC-Web)
// reach the chain: true, by connect-go's handlers calling the services over
// the in-process channel on the request goroutine; false, transcoded by
// vanguard to the browser grpc.Server's ServeHTTP.
const browserByConnect = true
