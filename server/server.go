package server

import (
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/server/loginthrottle"
	"github.com/shebasvc/sheba/store"
)

// Options configures the services.
type Options struct {
	// Log receives the one line of every unexpected error; the caller sees
	// only "internal error". Nil discards it.
	Log *slog.Logger
	// Events announces account and subscription changes to webhook
	// endpoints, in the transaction of each change. Nil announces nothing.
	Events Publisher
	// AllowPrivateWebhooks lets webhook endpoints point at addresses that
	// are not public and at any port (webhooks.allow_private_networks).
	AllowPrivateWebhooks bool
	// WebhookResolver looks up the hosts of webhook URLs at registration
	// (nil: net.DefaultResolver); tests answer names with their own.
	WebhookResolver *net.Resolver
	// MaxWebhookEndpoints is the most webhook endpoints one API key may
	// hold (webhooks.max_endpoints); 0 means no limit.
	MaxWebhookEndpoints int
	// WebhookSecretOverlap is how long the secret a rotation replaces
	// still signs deliveries (webhooks.secret_overlap); 0 stops it at once.
	WebhookSecretOverlap time.Duration
	// PageTokenKey is the HMAC-SHA256 key of page tokens, at least 32
	// bytes and the same on every replica; empty means a random key, so
	// tokens work only on this process.
	PageTokenKey []byte
	// Logins throttles repeated failed logins per username and caller
	// (limits.login_failures). Nil throttles nothing.
	Logins *loginthrottle.Throttle
}

// Services are the sheba.v1 services, ready to be registered on any
// grpc.ServiceRegistrar: the grpc.Server, and the in-process channel of the
// REST gateway.
type Services struct {
	ping         pingServer
	account      *accountServer
	subscription *subscriptionServer
	webhook      *webhookServer
}

// New returns the services over st. It connects nowhere.
func New(st *store.Store, opts Options) (*Services, error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	hasher, err := newPasswordHasher(defaultHashParams(), defaultHashLimits())
	if err != nil {
		return nil, err
	}
	tokens, err := newPageTokens(opts.PageTokenKey)
	if err != nil {
		return nil, err
	}
	errs := errorMapper{log: log}
	events := opts.Events
	if events == nil {
		events = noEvents{}
	}
	logins := opts.Logins
	if logins == nil {
		logins = loginthrottle.New(0, 0)
	}
	return &Services{
		account:      &accountServer{store: st, hasher: hasher, errs: errs, events: events, logins: logins},
		subscription: &subscriptionServer{store: st, errs: errs, events: events, tokens: tokens},
		webhook:      newWebhookServer(st, errs, tokens, opts),
	}, nil
}

// Register registers every service on r.
func (s *Services) Register(r grpc.ServiceRegistrar) {
	for _, svc := range s.services() {
		r.RegisterService(svc.desc, svc.impl)
	}
}

// service is a service's description and its implementation.
type service struct {
	desc *grpc.ServiceDesc
	impl any
}

// services are the services, in the order of descs.
func (s *Services) services() []service {
	return []service{
		{&shebav1.PingService_ServiceDesc, s.ping},
		{&shebav1.AccountService_ServiceDesc, s.account},
		{&shebav1.SubscriptionService_ServiceDesc, s.subscription},
		{&shebav1.WebhookService_ServiceDesc, s.webhook},
	}
}

// descs lists the services, for what is said of them below.
var descs = []*grpc.ServiceDesc{
	&shebav1.PingService_ServiceDesc,
	&shebav1.AccountService_ServiceDesc,
	&shebav1.SubscriptionService_ServiceDesc,
	&shebav1.WebhookService_ServiceDesc,
}

// ServiceNames returns the full names of the services.
func ServiceNames() []string {
	names := make([]string, len(descs))
	for i, d := range descs {
		names[i] = d.ServiceName
	}
	return names
}

// Methods returns the full names (/service/method) of every method.
func Methods() []string {
	var methods []string
	for _, d := range descs {
		for _, m := range d.Methods {
			methods = append(methods, "/"+d.ServiceName+"/"+m.MethodName)
		}
	}
	return methods
}

// DatabaseMethods returns the full names of the methods that cannot answer
// without the database: every method but the ping.
func DatabaseMethods() map[string]bool {
	needs := map[string]bool{}
	for _, d := range descs {
		for _, m := range d.Methods {
			needs["/"+d.ServiceName+"/"+m.MethodName] = d != &shebav1.PingService_ServiceDesc
		}
	}
	return needs
}

// IdempotentMethods returns the full names of the methods that take an
// idempotency key (docs/api.md#idempotency-keys): the creates and the
// cancel, whose retry could otherwise change the data twice or answer
// differently.
func IdempotentMethods() map[string]bool {
	return map[string]bool{
		shebav1.AccountService_CreateAccount_FullMethodName:           true,
		shebav1.SubscriptionService_CreateSubscription_FullMethodName: true,
		shebav1.SubscriptionService_CancelSubscription_FullMethodName: true,
	}
}
