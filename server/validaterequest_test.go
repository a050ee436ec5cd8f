package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/emptypb"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/callinfo"
	"github.com/shebasvc/sheba/server"
)

// handler calls one method's handler with a request of its type and
// returns only its error.
type handler func(context.Context, proto.Message) error

func call[Req proto.Message, Resp any](f func(context.Context, Req) (Resp, error)) handler {
	return func(ctx context.Context, req proto.Message) error {
		_, err := f(ctx, req.(Req))
		return err
	}
}

// asCaller returns ctx carrying the API key id of a caller, as auth leaves
// it for the handlers.
func asCaller(ctx context.Context, callerID string) context.Context {
	return callinfo.NewContext(ctx, &callinfo.Info{CallerID: callerID})
}

// TestValidateRequest checks ValidateRequest against the handlers: nil for
// a valid request of every method (which its handler does not answer
// InvalidArgument), and for an invalid one the very error the handler
// answers, code, message and details.
func TestValidateRequest(t *testing.T) {
	t.Parallel()
	s, _ := newServices(t)
	handlers := map[string]handler{
		shebav1.PingService_Ping_FullMethodName:                       call(s.ping.Ping),
		shebav1.AccountService_CreateAccount_FullMethodName:           call(s.account.CreateAccount),
		shebav1.AccountService_Login_FullMethodName:                   call(s.account.Login),
		shebav1.AccountService_GetAccount_FullMethodName:              call(s.account.GetAccount),
		shebav1.SubscriptionService_CreateSubscription_FullMethodName: call(s.subscription.CreateSubscription),
		shebav1.SubscriptionService_GetSubscription_FullMethodName:    call(s.subscription.GetSubscription),
		shebav1.SubscriptionService_CancelSubscription_FullMethodName: call(s.subscription.CancelSubscription),
		shebav1.SubscriptionService_ListSubscriptions_FullMethodName:  call(s.subscription.ListSubscriptions),
		shebav1.WebhookService_CreateWebhookEndpoint_FullMethodName:   call(s.webhook.CreateWebhookEndpoint),
		shebav1.WebhookService_GetWebhookEndpoint_FullMethodName:      call(s.webhook.GetWebhookEndpoint),
		shebav1.WebhookService_ListWebhookEndpoints_FullMethodName:    call(s.webhook.ListWebhookEndpoints),
		shebav1.WebhookService_DeleteWebhookEndpoint_FullMethodName:   call(s.webhook.DeleteWebhookEndpoint),
		shebav1.WebhookService_RotateWebhookSecret_FullMethodName:     call(s.webhook.RotateWebhookSecret),
		shebav1.WebhookService_ListWebhookDeliveries_FullMethodName:   call(s.webhook.ListWebhookDeliveries),
	}
	alice := asCaller(t.Context(), "key-alice")
	bob := asCaller(t.Context(), "key-bob")
	subToken, endpointToken := pageTokensOf(t, s, alice)

	const unknownID = "00000000-0000-4000-8000-000000000000"
	tests := []struct {
		method string
		name   string
		ctx    context.Context // nil: alice's
		req    proto.Message
		valid  bool
	}{
		// Ping takes no input: no request of it is invalid.
		{shebav1.PingService_Ping_FullMethodName, "empty", nil, &shebav1.PingRequest{}, true},

		{shebav1.AccountService_CreateAccount_FullMethodName, "valid", nil,
			&shebav1.CreateAccountRequest{Username: "dave", Password: "correct horse"}, true},
		{shebav1.AccountService_CreateAccount_FullMethodName, "bad username and password", nil,
			&shebav1.CreateAccountRequest{Username: "Al", Password: "short"}, false},
		{shebav1.AccountService_Login_FullMethodName, "unknown username", nil,
			&shebav1.LoginRequest{Username: "nobody", Password: "correct horse"}, true},
		{shebav1.AccountService_Login_FullMethodName, "long password", nil,
			&shebav1.LoginRequest{Username: "nobody", Password: strings.Repeat("x", 257)}, false},
		{shebav1.AccountService_GetAccount_FullMethodName, "upper-case id", nil,
			&shebav1.GetAccountRequest{AccountId: strings.ToUpper(unknownID)}, true},
		{shebav1.AccountService_GetAccount_FullMethodName, "malformed id", nil,
			&shebav1.GetAccountRequest{AccountId: "42"}, false},

		{shebav1.SubscriptionService_CreateSubscription_FullMethodName, "unknown account", nil,
			&shebav1.CreateSubscriptionRequest{AccountId: unknownID, Plan: "pro"}, true},
		{shebav1.SubscriptionService_CreateSubscription_FullMethodName, "bad id and plan", nil,
			&shebav1.CreateSubscriptionRequest{AccountId: "42", Plan: "Pro!"}, false},
		{shebav1.SubscriptionService_GetSubscription_FullMethodName, "unknown account", nil,
			&shebav1.GetSubscriptionRequest{AccountId: unknownID}, true},
		{shebav1.SubscriptionService_GetSubscription_FullMethodName, "no id", nil,
			&shebav1.GetSubscriptionRequest{}, false},
		{shebav1.SubscriptionService_CancelSubscription_FullMethodName, "unknown account", nil,
			&shebav1.CancelSubscriptionRequest{AccountId: unknownID}, true},
		{shebav1.SubscriptionService_CancelSubscription_FullMethodName, "id without hyphens", nil,
			&shebav1.CancelSubscriptionRequest{AccountId: strings.ReplaceAll(unknownID, "-", "")}, false},
		{shebav1.SubscriptionService_ListSubscriptions_FullMethodName, "next page", nil,
			&shebav1.ListSubscriptionsRequest{PageSize: 1, PageToken: subToken}, true},
		{shebav1.SubscriptionService_ListSubscriptions_FullMethodName, "token of another plan", nil,
			&shebav1.ListSubscriptionsRequest{PageToken: subToken, Plan: "basic"}, false},
		{shebav1.SubscriptionService_ListSubscriptions_FullMethodName, "negative size, bad plan, made-up token", nil,
			&shebav1.ListSubscriptionsRequest{PageSize: -1, Plan: "Pro!", PageToken: "made-up"}, false},

		{shebav1.WebhookService_CreateWebhookEndpoint_FullMethodName, "valid", nil,
			&shebav1.CreateWebhookEndpointRequest{Url: "https://8.8.8.8/hook-3", EventTypes: []string{"account.created"}}, true},
		{shebav1.WebhookService_CreateWebhookEndpoint_FullMethodName, "every field bad", nil,
			&shebav1.CreateWebhookEndpointRequest{
				Url:         "ftp://example.com/hook",
				EventTypes:  []string{"account.created", "account.deleted", "account.created", "\xff"},
				Description: strings.Repeat("d", 257),
			}, false},
		{shebav1.WebhookService_CreateWebhookEndpoint_FullMethodName, "no URL, no types", nil,
			&shebav1.CreateWebhookEndpointRequest{}, false},
		{shebav1.WebhookService_GetWebhookEndpoint_FullMethodName, "unknown id", nil,
			&shebav1.GetWebhookEndpointRequest{EndpointId: unknownID}, true},
		{shebav1.WebhookService_GetWebhookEndpoint_FullMethodName, "malformed id", nil,
			&shebav1.GetWebhookEndpointRequest{EndpointId: "42"}, false},
		{shebav1.WebhookService_ListWebhookEndpoints_FullMethodName, "next page", nil,
			&shebav1.ListWebhookEndpointsRequest{PageSize: 1, PageToken: endpointToken}, true},
		{shebav1.WebhookService_ListWebhookEndpoints_FullMethodName, "token of another caller", bob,
			&shebav1.ListWebhookEndpointsRequest{PageToken: endpointToken}, false},
		{shebav1.WebhookService_ListWebhookEndpoints_FullMethodName, "token of another listing", nil,
			&shebav1.ListWebhookEndpointsRequest{PageSize: -5, PageToken: subToken}, false},
		{shebav1.WebhookService_DeleteWebhookEndpoint_FullMethodName, "unknown id", nil,
			&shebav1.DeleteWebhookEndpointRequest{EndpointId: unknownID}, true},
		{shebav1.WebhookService_DeleteWebhookEndpoint_FullMethodName, "no id", nil,
			&shebav1.DeleteWebhookEndpointRequest{}, false},
		{shebav1.WebhookService_RotateWebhookSecret_FullMethodName, "unknown id", nil,
			&shebav1.RotateWebhookSecretRequest{EndpointId: unknownID}, true},
		{shebav1.WebhookService_RotateWebhookSecret_FullMethodName, "malformed id", nil,
			&shebav1.RotateWebhookSecretRequest{EndpointId: "{" + unknownID[1:35] + "}"}, false},
		{shebav1.WebhookService_ListWebhookDeliveries_FullMethodName, "unknown endpoint", nil,
			&shebav1.ListWebhookDeliveriesRequest{EndpointId: unknownID, PageSize: 2000}, true},
		{shebav1.WebhookService_ListWebhookDeliveries_FullMethodName, "token of another listing", nil,
			&shebav1.ListWebhookDeliveriesRequest{EndpointId: unknownID, PageToken: endpointToken}, false},
		{shebav1.WebhookService_ListWebhookDeliveries_FullMethodName, "bad id and size", nil,
			&shebav1.ListWebhookDeliveriesRequest{EndpointId: "42", PageSize: -1}, false},
	}
	covered := map[string]map[bool]bool{}
	for _, test := range tests {
		if covered[test.method] == nil {
			covered[test.method] = map[bool]bool{}
		}
		covered[test.method][test.valid] = true
		t.Run(test.method+"/"+test.name, func(t *testing.T) {
			ctx := test.ctx
			if ctx == nil {
				ctx = alice
			}
			got := s.all.ValidateRequest(ctx, test.req)
			want := handlers[test.method](ctx, test.req)
			if test.valid {
				if got != nil {
					t.Errorf("ValidateRequest: %v, want nil", got)
				}
				if status.Code(want) == codes.InvalidArgument {
					t.Errorf("the handler answers %v to a request taken as valid", want)
				}
				return
			}
			if status.Code(want) != codes.InvalidArgument {
				t.Fatalf("the handler answers %v to a request taken as invalid, want InvalidArgument", want)
			}
			if diff := cmp.Diff(status.Convert(want).Proto(), status.Convert(got).Proto(), protocmp.Transform()); diff != "" {
				t.Errorf("ValidateRequest and the handler differ (-handler +ValidateRequest):\n%s", diff)
			}
		})
	}

	// Every method is in the table, with an invalid request unless it has
	// no input rules.
	for _, method := range server.Methods() {
		hasInvalid := method != shebav1.PingService_Ping_FullMethodName
		if handlers[method] == nil || !covered[method][true] || covered[method][false] != hasInvalid {
			t.Errorf("%s: want a handler, a valid request and, unless Ping, an invalid one; got handler %t, %v",
				method, handlers[method] != nil, covered[method])
		}
	}
}

// pageTokensOf returns a page token of ListSubscriptions (no plan filter)
// and one of ListWebhookEndpoints for the caller of ctx, made by listing
// what it creates one row a page.
func pageTokensOf(t *testing.T, s *services, ctx context.Context) (subToken, endpointToken string) {
	t.Helper()
	created, err := s.account.CreateAccount(ctx, &shebav1.CreateAccountRequest{Username: "erin", Password: "correct horse"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetAccount().GetId()
	for range 2 {
		if _, err := s.subscription.CreateSubscription(ctx, &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.subscription.CancelSubscription(ctx, &shebav1.CancelSubscriptionRequest{AccountId: id}); err != nil {
			t.Fatal(err)
		}
	}
	subs, err := s.subscription.ListSubscriptions(ctx, &shebav1.ListSubscriptionsRequest{PageSize: 1})
	if err != nil || subs.GetNextPageToken() == "" {
		t.Fatalf("ListSubscriptions: got %v, %v; want a next page", subs, err)
	}
	for _, url := range []string{"https://8.8.8.8/hook-1", "https://8.8.8.8/hook-2"} {
		_, err := s.webhook.CreateWebhookEndpoint(ctx, &shebav1.CreateWebhookEndpointRequest{Url: url, EventTypes: []string{"account.created"}})
		if err != nil {
			t.Fatalf("CreateWebhookEndpoint %s: %v", url, err)
		}
	}
	endpoints, err := s.webhook.ListWebhookEndpoints(ctx, &shebav1.ListWebhookEndpointsRequest{PageSize: 1})
	if err != nil || endpoints.GetNextPageToken() == "" {
		t.Fatalf("ListWebhookEndpoints: got %v, %v; want a next page", endpoints, err)
	}
	return subs.GetNextPageToken(), endpoints.GetNextPageToken()
}

// TestValidateRequestLeavesToTheHandler checks what ValidateRequest does not
// answer, as documented: a message of no method's is an error, a webhook
// call without a caller is the handler's to refuse, and so is a URL whose
// target is looked up.
func TestValidateRequestLeavesToTheHandler(t *testing.T) {
	t.Parallel()
	s, _ := newServices(t)

	for _, req := range []proto.Message{&emptypb.Empty{}, &shebav1.PingResponse{}, nil} {
		if err := s.all.ValidateRequest(t.Context(), req); err == nil {
			t.Errorf("ValidateRequest(%T): nil, want an error", req)
		}
	}

	noCaller := &shebav1.GetWebhookEndpointRequest{EndpointId: "42"}
	if err := s.all.ValidateRequest(t.Context(), noCaller); err != nil {
		t.Errorf("ValidateRequest without a caller: %v, want nil", err)
	}
	_, err := s.webhook.GetWebhookEndpoint(t.Context(), noCaller)
	wantCode(t, "handler without a caller", err, codes.Unauthenticated, "")

	ctx := asCaller(t.Context(), "key-carol")
	private := &shebav1.CreateWebhookEndpointRequest{Url: "http://127.0.0.1/hook", EventTypes: []string{"account.created"}}
	if err := s.all.ValidateRequest(ctx, private); err != nil {
		t.Errorf("ValidateRequest of a private target: %v, want nil", err)
	}
	_, err = s.webhook.CreateWebhookEndpoint(ctx, private)
	wantCode(t, "handler on a private target", err, codes.InvalidArgument, "url")
}
