package app

import (
	"net"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/webhooks"
)

// options are what New takes beside the config: where tracing comes from,
// and the knobs tests turn to observe the service or speed it up.
type options struct {
	lookup         func(string) (string, bool)
	version        string
	tracerProvider trace.TracerProvider
	healthInterval time.Duration
	webhookOptions func(*webhooks.Options)
	resolver       *net.Resolver
	interceptors   []grpc.UnaryServerInterceptor
	eventServer    shebav1.EventServiceServer
	// connectHandlers: the browser protocols' unary calls by connect-go's
	// handlers rather than vanguard (gateway.Options.ConnectHandlers).
	connectHandlers bool
}

func evaluateOptions(opts []Option) options {
	o := options{
		lookup:          func(string) (string, bool) { return "", false },
		version:         "dev",
		healthInterval:  2 * time.Second,
		connectHandlers: browserByConnect,
	}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// Option changes what New builds beyond the config.
type Option func(*options)

// WithEnv reads the standard OTEL_* variables through lookup to configure
// tracing (docs/observability.md#traces). Without it, or with none of them
// set, tracing is off.
func WithEnv(lookup func(string) (string, bool)) Option {
	return func(o *options) { o.lookup = lookup }
}

// WithVersion is the service.version of the spans (default "dev").
func WithVersion(v string) Option {
	return func(o *options) { o.version = v }
}

// WithTracerProvider sends the spans of every call, query and delivery to
// tp, in place of the provider the OTEL_* variables configure. The caller
// owns tp and flushes it.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracerProvider = tp }
}

// WithHealthInterval pings the database every d (default 2s).
func WithHealthInterval(d time.Duration) Option {
	return func(o *options) { o.healthInterval = d }
}

// WithWebhookOptions lets f change the webhook runner's options after the
// config has set them (tests shorten its intervals).
func WithWebhookOptions(f func(*webhooks.Options)) Option {
	return func(o *options) { o.webhookOptions = f }
}

// WithWebhookResolver looks up the hosts of webhook endpoints with r, at
// registration and at each connection, in place of the system's resolver
// (tests answer names with their own).
func WithWebhookResolver(r *net.Resolver) Option {
	return func(o *options) { o.resolver = r }
}

// WithUnaryInterceptor adds i to the end of the chain, after every link of
// sheba's own and right before the handler, on both transports. Tests use
// it to observe, slow down or fail calls as a handler would; several run
// in the order given.
func WithUnaryInterceptor(i grpc.UnaryServerInterceptor) Option {
	return func(o *options) { o.interceptors = append(o.interceptors, i) }
}

// WithEventServer serves EventService with s in place of sheba's own, on
// every transport, behind the same chain. Tests stream canned events and
// heartbeats with it.
func WithEventServer(s shebav1.EventServiceServer) Option {
	return func(o *options) { o.eventServer = s }
}

// eventRegistrar registers services on ServiceRegistrar, EventService with
// impl in place of the one given (WithEventServer).
type eventRegistrar struct {
	grpc.ServiceRegistrar
	impl shebav1.EventServiceServer
}

func (r eventRegistrar) RegisterService(desc *grpc.ServiceDesc, impl any) {
	if desc.ServiceName == shebav1.EventService_ServiceDesc.ServiceName {
		impl = r.impl
	}
	r.ServiceRegistrar.RegisterService(desc, impl)
}

// registrar is r, or r serving the event server of o if it has one.
func (o options) registrar(r grpc.ServiceRegistrar) grpc.ServiceRegistrar {
	if o.eventServer == nil {
		return r
	}
	return eventRegistrar{ServiceRegistrar: r, impl: o.eventServer}
}

// withConnectHandlers serves the browser protocols' calls by connect-go's
// handlers when on, by vanguard when off, whatever browserByConnect says
// (tests and benchmarks compare both).
func withConnectHandlers(on bool) Option {
	return func(o *options) { o.connectHandlers = on }
}
