package e2e

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/idempotency"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/internal/app"
	"github.com/shebasvc/sheba/store/storetest"
)

// policySamples holds a valid request of every method, which the policy
// links let through: TestMethodPolicies fails for a method of the protos
// without one, so a new method is covered once it has its sample.
var policySamples = map[string]proto.Message{
	shebav1.PingService_Ping_FullMethodName:                       &shebav1.PingRequest{},
	shebav1.AccountService_CreateAccount_FullMethodName:           &shebav1.CreateAccountRequest{Username: "policy", Password: "correct horse"},
	shebav1.AccountService_Login_FullMethodName:                   &shebav1.LoginRequest{Username: "policy", Password: "correct horse"},
	shebav1.AccountService_GetAccount_FullMethodName:              &shebav1.GetAccountRequest{AccountId: unknownID},
	shebav1.SubscriptionService_CreateSubscription_FullMethodName: &shebav1.CreateSubscriptionRequest{AccountId: unknownID, Plan: "pro"},
	shebav1.SubscriptionService_GetSubscription_FullMethodName:    &shebav1.GetSubscriptionRequest{AccountId: unknownID},
	shebav1.SubscriptionService_CancelSubscription_FullMethodName: &shebav1.CancelSubscriptionRequest{AccountId: unknownID},
	shebav1.SubscriptionService_ListSubscriptions_FullMethodName:  &shebav1.ListSubscriptionsRequest{},
	shebav1.SubscriptionService_UpdateSubscription_FullMethodName: &shebav1.UpdateSubscriptionRequest{
		AccountId: unknownID, Subscription: &shebav1.Subscription{Plan: "team"}},
	shebav1.WebhookService_CreateWebhookEndpoint_FullMethodName: &shebav1.CreateWebhookEndpointRequest{
		Url: "https://example.com/hook", EventTypes: []string{"account.created"}},
	shebav1.WebhookService_GetWebhookEndpoint_FullMethodName:    &shebav1.GetWebhookEndpointRequest{EndpointId: unknownID},
	shebav1.WebhookService_ListWebhookEndpoints_FullMethodName:  &shebav1.ListWebhookEndpointsRequest{},
	shebav1.WebhookService_DeleteWebhookEndpoint_FullMethodName: &shebav1.DeleteWebhookEndpointRequest{EndpointId: unknownID},
	shebav1.WebhookService_ListWebhookDeliveries_FullMethodName: &shebav1.ListWebhookDeliveriesRequest{EndpointId: unknownID},
	shebav1.WebhookService_RotateWebhookSecret_FullMethodName:   &shebav1.RotateWebhookSecretRequest{EndpointId: unknownID},
	shebav1.EventService_StreamEvents_FullMethodName:            &shebav1.StreamEventsRequest{EventTypes: []string{"account.created"}},
}

// stubHandlers answers every call, after the whole chain, with an empty
// response of its method in place of the handler, and counts the calls
// by method: what a test of the chain's policy links sees get through.
type stubHandlers struct {
	mu  sync.Mutex
	ran map[string]int
}

func (s *stubHandlers) option(t *testing.T) app.Option {
	return app.WithUnaryInterceptor(func(_ context.Context, _ any, info *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
		s.mu.Lock()
		s.ran[info.FullMethod]++
		s.mu.Unlock()
		return newResponse(t, info.FullMethod), nil
	})
}

// invokeAny calls m on conn with in and testKey: a unary call, or a
// server-streaming one read to its end (nil when it ends OK).
func invokeAny(ctx context.Context, t *testing.T, conn *grpc.ClientConn, m shebav1.MethodTable, in proto.Message, opts ...grpc.CallOption) error {
	if !m.ServerStreams {
		return conn.Invoke(ctx, m.FullName, in, newResponse(t, m.FullName), opts...)
	}
	s, err := conn.NewStream(metadata.AppendToOutgoingContext(ctx, "x-api-key", testKey), &grpc.StreamDesc{ServerStreams: true}, m.FullName, opts...)
	if err != nil {
		return err
	}
	if err := s.SendMsg(in); err != nil {
		return err
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	for {
		if err := s.RecvMsg(newResponse(t, m.FullName)); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

func (s *stubHandlers) count(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ran[method]
}

// newResponse returns a new, empty response message of the full method,
// from the descriptors the generated code registers.
func newResponse(t *testing.T, full string) proto.Message {
	for _, m := range apiMethods(t) {
		if fullMethod(m) == full {
			mt, err := protoregistry.GlobalTypes.FindMessageByName(m.Output().FullName())
			if err != nil {
				t.Errorf("%s: %v", full, err)
				return nil
			}
			return mt.New().Interface()
		}
	}
	t.Errorf("%s: no such method", full)
	return nil
}

// tableMethods returns every method of the method table, with its sample.
func tableMethods(t *testing.T) []shebav1.MethodTable {
	t.Helper()
	var methods []shebav1.MethodTable
	for _, svc := range shebav1.Services {
		for _, m := range svc.Methods {
			if policySamples[m.FullName] == nil {
				t.Errorf("%s: no sample request in policySamples", m.FullName)
				continue
			}
			methods = append(methods, m)
		}
	}
	if len(methods) == 0 {
		t.Fatal("no methods in the method table")
	}
	return methods
}

// TestMethodPolicies calls every method of the method table with a valid
// request, its handler stubbed (so only the chain decides), and checks
// that the method's policy (option (sheba.v1.policy)) is applied: a public
// method answers a caller without a key, a keyed one refuses it (every
// route and credential of that: TestAuthCoverage); an idempotent method
// answers a retry with the same Idempotency-Key from its record, without
// running again, and any other method runs again; a database method
// answers UNAVAILABLE while Postgres is down, and any other method runs.
func TestMethodPolicies(t *testing.T) {
	t.Parallel()
	t.Run("public and idempotent", func(t *testing.T) {
		t.Parallel()
		stub := &stubHandlers{ran: map[string]int{}}
		e := newTestEnvWith(t, nil, []app.Option{stub.option(t)})
		for _, m := range tableMethods(t) {
			in := policySamples[m.FullName]

			err := e.anon.Invoke(t.Context(), m.FullName, in, newResponse(t, m.FullName))
			switch {
			case m.Policy.Public && err != nil:
				t.Errorf("%s is public: without a key got %v, want it answered", m.FullName, err)
			case !m.Policy.Public && status.Code(err) != codes.Unauthenticated:
				t.Errorf("%s needs a key: without one got %v, want Unauthenticated", m.FullName, err)
			}
			before := stub.count(m.FullName)
			ctx := metadata.AppendToOutgoingContext(t.Context(), idempotency.MetadataKey, "policy-"+m.Name)
			var replayed []string
			for range 2 {
				var header metadata.MD
				if err := invokeAny(ctx, t, e.conn, m, in, grpc.Header(&header)); err != nil {
					t.Fatalf("%s with a key: %v", m.FullName, err)
				}
				replayed = append(replayed, header.Get(idempotency.ReplayedKey)...)
			}
			ran := stub.count(m.FullName) - before
			if m.Policy.Idempotent && (ran != 1 || len(replayed) != 1 || replayed[0] != "true") {
				t.Errorf("%s is idempotent: two calls with one Idempotency-Key ran %d times, replayed %q; want once, and the retry replayed", m.FullName, ran, replayed)
			}
			if !m.Policy.Idempotent && (ran != 2 || len(replayed) != 0) {
				t.Errorf("%s is not idempotent: two calls with one Idempotency-Key ran %d times, replayed %q; want twice, none replayed", m.FullName, ran, replayed)
			}
		}
	})
	t.Run("database", func(t *testing.T) {
		t.Parallel()
		stub := &stubHandlers{ran: map[string]int{}}
		e := startTestEnv(t, envSetup{
			opts:    []app.Option{app.WithHealthInterval(100 * time.Millisecond), stub.option(t)},
			poolURL: func(string) string { return storetest.UnreachableURL(t) },
		})
		waitFor(t, 10*time.Second, "not ready", func() bool { return e.readiness(t).notReady() })
		// Readiness is 503 from the start, before the first failed ping
		// has told the chain that the database is down: wait for that too.
		waitFor(t, 10*time.Second, "the database known down", func() bool {
			err := e.conn.Invoke(t.Context(), shebav1.AccountService_GetAccount_FullMethodName,
				policySamples[shebav1.AccountService_GetAccount_FullMethodName], new(shebav1.GetAccountResponse))
			return status.Code(err) == codes.Unavailable
		})
		for _, m := range tableMethods(t) {
			var header metadata.MD
			err := invokeAny(t.Context(), t, e.conn, m, policySamples[m.FullName], grpc.Header(&header))
			if m.Policy.Database {
				wantGRPCDetails(t, m.FullName, err, header, codes.Unavailable, reason.DatabaseUnavailable)
				continue
			}
			if err != nil || stub.count(m.FullName) != 1 {
				t.Errorf("%s needs no database: with it down got %v, ran %d times; want it answered by its handler", m.FullName, err, stub.count(m.FullName))
			}
		}
	})
}
