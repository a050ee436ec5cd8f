package server

import (
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
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
	// EventStream configures StreamEvents (the events section).
	EventStream EventOptions
}

// Services are the sheba.v1 services, ready to be registered on any
// grpc.ServiceRegistrar: the grpc.Server, and the in-process channel of the
// REST gateway.
type Services struct {
	ping         pingServer
	account      *accountServer
	subscription *subscriptionServer
	webhook      *webhookServer
	event        *eventServer
	// list is every service of the method table with its implementation,
	// in the table's order.
	list []service
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
	s := &Services{
		account:      &accountServer{store: st, hasher: hasher, errs: errs, events: events, logins: logins},
		subscription: &subscriptionServer{store: st, errs: errs, events: events, tokens: tokens},
		webhook:      newWebhookServer(st, errs, tokens, opts),
		event:        newEventServer(opts.EventStream),
	}
	if s.list, err = s.services(); err != nil {
		return nil, err
	}
	return s, nil
}

// Register registers every service on r.
func (s *Services) Register(r grpc.ServiceRegistrar) {
	for _, svc := range s.list {
		r.RegisterService(svc.table.Desc, svc.impl)
	}
}

// service is a service of the method table and its implementation.
type service struct {
	table *shebav1.ServiceTable
	impl  any
}

// services matches every service of the method table with its
// implementation: a service of the protos without one here, or one here
// that the protos do not have, is an error at start.
func (s *Services) services() ([]service, error) {
	impls := map[string]any{
		shebav1.PingService_Table.Name:         s.ping,
		shebav1.AccountService_Table.Name:      s.account,
		shebav1.SubscriptionService_Table.Name: s.subscription,
		shebav1.WebhookService_Table.Name:      s.webhook,
		shebav1.EventService_Table.Name:        s.event,
	}
	list := make([]service, 0, len(shebav1.Services))
	for _, t := range shebav1.Services {
		impl, ok := impls[t.Name]
		if !ok {
			return nil, fmt.Errorf("server: service %s of the protos has no implementation (server.Services)", t.Name)
		}
		delete(impls, t.Name)
		list = append(list, service{t, impl})
	}
	if len(impls) > 0 {
		return nil, fmt.Errorf("server: %s implemented but no service of the protos", strings.Join(slices.Sorted(maps.Keys(impls)), ", "))
	}
	return list, nil
}

// ServiceNames returns the full names of the services.
func ServiceNames() []string {
	names := make([]string, len(shebav1.Services))
	for i, t := range shebav1.Services {
		names[i] = t.Name
	}
	return names
}

// Methods returns the full names (/service/method) of every method.
func Methods() []string {
	methods := make([]string, len(shebav1.Methods))
	for i, m := range shebav1.Methods {
		methods[i] = m.FullName
	}
	return methods
}

// StreamingMethods returns the full names of the server-streaming methods.
func StreamingMethods() []string {
	var methods []string
	for _, m := range shebav1.Methods {
		if m.ServerStreams {
			methods = append(methods, m.FullName)
		}
	}
	return methods
}

// methodsWhere returns the full names of the methods whose policy has has.
func methodsWhere(has func(shebav1.MethodPolicyTable) bool) map[string]bool {
	set := map[string]bool{}
	for _, m := range shebav1.Methods {
		if has(m.Policy) {
			set[m.FullName] = true
		}
	}
	return set
}

// DatabaseMethods returns the full names of the methods that cannot answer
// without the database (option (sheba.v1.policy).database).
func DatabaseMethods() map[string]bool {
	return methodsWhere(func(p shebav1.MethodPolicyTable) bool { return p.Database })
}

// IdempotentMethods returns the full names of the methods that take an
// idempotency key (docs/api.md#idempotency-keys; option
// (sheba.v1.policy).idempotent): the creates and the cancel, whose retry
// could otherwise change the data twice or answer differently.
func IdempotentMethods() map[string]bool {
	return methodsWhere(func(p shebav1.MethodPolicyTable) bool { return p.Idempotent })
}

// ReadOnlyMethods returns the full names of the methods that read the
// database and change nothing (option (sheba.v1.policy).read_only): they
// may run on a standby (docs/operations.md#reading-from-standbys).
func ReadOnlyMethods() map[string]bool {
	return methodsWhere(func(p shebav1.MethodPolicyTable) bool { return p.Database && p.ReadOnly })
}

// WriteMethods returns the full names of the methods that may change the
// database: those that need it and are not read-only, but for the
// server-streaming ones (StreamEvents), which change nothing and are yet
// not read-only, because a stream reads the primary alone.
func WriteMethods() map[string]bool {
	set := methodsWhere(func(p shebav1.MethodPolicyTable) bool { return p.Database && !p.ReadOnly })
	for _, m := range shebav1.Methods {
		if m.ServerStreams {
			delete(set, m.FullName)
		}
	}
	return set
}
