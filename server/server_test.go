package server_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/server"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
)

// The handlers are tested here as plain Go calls on a real store, with no
// listener and no chain; e2e tests them again end to end over both
// transports. Without the chain, no request is validated: the input rules
// are the protos' constraints, which the chain's validation link enforces
// (interceptors/protovalidate; e2e's TestInvalidRequests).

func TestMain(m *testing.M) {
	os.Exit(storetest.Run(m))
}

// services are the implementations of the services, as Register gives
// them to a grpc.ServiceRegistrar, to call directly, and the Services
// they come from.
type services struct {
	all          *server.Services
	ping         shebav1.PingServiceServer
	account      shebav1.AccountServiceServer
	subscription shebav1.SubscriptionServiceServer
	webhook      shebav1.WebhookServiceServer
}

// RegisterService keeps the implementation of each service the tests call.
func (s *services) RegisterService(desc *grpc.ServiceDesc, impl any) {
	switch desc.ServiceName {
	case shebav1.PingService_ServiceDesc.ServiceName:
		s.ping = impl.(shebav1.PingServiceServer)
	case shebav1.AccountService_ServiceDesc.ServiceName:
		s.account = impl.(shebav1.AccountServiceServer)
	case shebav1.SubscriptionService_ServiceDesc.ServiceName:
		s.subscription = impl.(shebav1.SubscriptionServiceServer)
	case shebav1.WebhookService_ServiceDesc.ServiceName:
		s.webhook = impl.(shebav1.WebhookServiceServer)
	}
}

// newServices returns the services over a fresh database, and what they
// logged.
func newServices(t *testing.T) (*services, *strings.Builder) {
	t.Helper()
	return newServicesOn(t, store.New(storetest.NewPool(t)))
}

func newServicesOn(t *testing.T, st *store.Store) (*services, *strings.Builder) {
	t.Helper()
	var logs strings.Builder
	s, err := server.New(st, server.Options{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	impls := services{all: s}
	s.Register(&impls)
	return &impls, &logs
}

// wantCode fails the test unless err has code want and, if field is not
// empty, a BadRequest violation of that field.
func wantCode(t *testing.T, what string, err error, want codes.Code, field string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != want {
		t.Fatalf("%s: got %v, want %v", what, err, want)
	}
	if field == "" {
		return
	}
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				if v.GetField() == field {
					return
				}
			}
		}
	}
	t.Errorf("%s: no violation of field %q in %v", what, field, st.Details())
}

func TestAccounts(t *testing.T) {
	t.Parallel()
	s, _ := newServices(t)
	ctx := t.Context()
	acc := s.account

	created, err := acc.CreateAccount(ctx, &shebav1.CreateAccountRequest{Username: "alice", Password: "correct horse"})
	if err != nil {
		t.Fatalf("CreateAccount: %v", err)
	}
	id := created.GetAccount().GetId()
	got, err := acc.GetAccount(ctx, &shebav1.GetAccountRequest{AccountId: strings.ToUpper(id)})
	if err != nil {
		t.Fatalf("GetAccount by the upper-case id: %v", err)
	}
	if got.GetAccount().GetUsername() != "alice" || got.GetAccount().GetId() != id {
		t.Errorf("GetAccount: got %v, want alice with id %s", got.GetAccount(), id)
	}
	login, err := acc.Login(ctx, &shebav1.LoginRequest{Username: "alice", Password: "correct horse"})
	if err != nil || login.GetAccount().GetId() != id {
		t.Fatalf("Login: got %v, %v; want the account", login, err)
	}

	for _, test := range []struct {
		name  string
		call  func() error
		code  codes.Code
		field string
	}{
		{"taken username", func() error {
			_, err := acc.CreateAccount(ctx, &shebav1.CreateAccountRequest{Username: "alice", Password: "another one"})
			return err
		}, codes.AlreadyExists, ""},
		{"wrong password", func() error {
			_, err := acc.Login(ctx, &shebav1.LoginRequest{Username: "alice", Password: "wrong horse"})
			return err
		}, codes.Unauthenticated, ""},
		{"unknown user", func() error {
			_, err := acc.Login(ctx, &shebav1.LoginRequest{Username: "nobody", Password: "wrong horse"})
			return err
		}, codes.Unauthenticated, ""},
		{"unknown id", func() error {
			_, err := acc.GetAccount(ctx, &shebav1.GetAccountRequest{AccountId: "00000000-0000-4000-8000-000000000000"})
			return err
		}, codes.NotFound, ""},
		// Past the chain only if a handler is called without it: no row
		// has it, and it is never a 500.
		{"malformed id", func() error {
			_, err := acc.GetAccount(ctx, &shebav1.GetAccountRequest{AccountId: "42"})
			return err
		}, codes.NotFound, ""},
	} {
		t.Run(test.name, func(t *testing.T) {
			wantCode(t, test.name, test.call(), test.code, test.field)
		})
	}
}

func TestSubscriptions(t *testing.T) {
	t.Parallel()
	s, _ := newServices(t)
	ctx := t.Context()
	created, err := s.account.CreateAccount(ctx, &shebav1.CreateAccountRequest{Username: "carol", Password: "correct horse"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetAccount().GetId()
	sub := s.subscription

	if _, err := sub.CreateSubscription(ctx, &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"}); err != nil {
		t.Fatalf("CreateSubscription: %v", err)
	}
	_, err = sub.CreateSubscription(ctx, &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"})
	wantCode(t, "second active subscription", err, codes.AlreadyExists, "")
	_, err = sub.CreateSubscription(ctx, &shebav1.CreateSubscriptionRequest{AccountId: "00000000-0000-4000-8000-000000000000", Plan: "pro"})
	wantCode(t, "unknown account", err, codes.NotFound, "")

	canceled, err := sub.CancelSubscription(ctx, &shebav1.CancelSubscriptionRequest{AccountId: id})
	if err != nil {
		t.Fatalf("CancelSubscription: %v", err)
	}
	if got := canceled.GetSubscription().GetStatus(); got != shebav1.SubscriptionStatus_SUBSCRIPTION_STATUS_CANCELED || canceled.GetSubscription().GetCancelTime() == nil {
		t.Errorf("canceled subscription: got status %v, cancel time %v", got, canceled.GetSubscription().GetCancelTime())
	}
	_, err = sub.GetSubscription(ctx, &shebav1.GetSubscriptionRequest{AccountId: id})
	wantCode(t, "get after cancel", err, codes.NotFound, "")

	// Three subscriptions in pages of two: a token, then the last page.
	for range 2 {
		if _, err := sub.CreateSubscription(ctx, &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"}); err != nil {
			t.Fatal(err)
		}
		if _, err := sub.CancelSubscription(ctx, &shebav1.CancelSubscriptionRequest{AccountId: id}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := sub.ListSubscriptions(ctx, &shebav1.ListSubscriptionsRequest{PageSize: 2})
	if err != nil || len(first.GetSubscriptions()) != 2 || first.GetNextPageToken() == "" {
		t.Fatalf("first page: got %v, %v; want 2 rows and a token", first, err)
	}
	last, err := sub.ListSubscriptions(ctx, &shebav1.ListSubscriptionsRequest{PageSize: 2, PageToken: first.GetNextPageToken()})
	if err != nil || len(last.GetSubscriptions()) != 1 || last.GetNextPageToken() != "" {
		t.Fatalf("last page: got %v, %v; want 1 row and no token", last, err)
	}
	_, err = sub.ListSubscriptions(ctx, &shebav1.ListSubscriptionsRequest{PageToken: first.GetNextPageToken(), Plan: "basic"})
	wantCode(t, "token with another filter", err, codes.InvalidArgument, "page_token")
}

// TestStoreErrors checks the error table on the errors a store gives when
// the database is away or the deadline has passed: the code says what to
// do, the message nothing of the driver.
func TestStoreErrors(t *testing.T) {
	t.Parallel()
	pool, err := store.OpenPool(t.Context(), storetest.UnreachableURL(t), 2, tracenoop.NewTracerProvider())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, logs := newServicesOn(t, store.New(pool))

	_, err = s.account.GetAccount(t.Context(), &shebav1.GetAccountRequest{AccountId: "00000000-0000-4000-8000-000000000000"})
	wantCode(t, "database away", err, codes.Unavailable, "")
	if msg := status.Convert(err).Message(); msg != "database unavailable" {
		t.Errorf("database away: message %q, want %q", msg, "database unavailable")
	}
	if !strings.Contains(logs.String(), "get account") {
		t.Errorf("database away: the operation is not logged: %q", logs.String())
	}

	live, _ := newServices(t)
	ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel()
	_, err = live.subscription.GetSubscription(ctx, &shebav1.GetSubscriptionRequest{AccountId: "00000000-0000-4000-8000-000000000000"})
	wantCode(t, "deadline passed", err, codes.DeadlineExceeded, "")
}
