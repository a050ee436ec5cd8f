package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/shebasvc/sheba/e2e/resttest"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// invalidRequest is a request that breaks an input rule, as the tests
// send it, and the answer it gets on every transport.
type invalidRequest struct {
	name   string
	method string        // the gRPC method
	req    proto.Message // on gRPC and Connect
	// verb, path and body are the request on REST.
	verb, path, body string
	// header holds name, value pairs sent on every transport.
	header []string
	// fields are the BadRequest's field violations, in order.
	fields []string
	// code is the answer's code (InvalidArgument if 0), httpCode its HTTP
	// code on REST (400 if 0), why its ErrorInfo reason (INVALID_ARGUMENT
	// if "").
	code     codes.Code
	httpCode int
	why      string
}

// TestInvalidRequests sends every invalid request of the tests over gRPC,
// REST and Connect (JSON), and checks the answer: the code, the
// BadRequest's field names in order, and the one ErrorInfo's reason. Run
// with -v, it logs each answer's message and violations.
//
// The answers are those the handlers gave when they checked the rules by
// hand, but where a request breaks a constraint of its proto and a rule
// that only its handler checks (a page token), or where an idempotency
// key is wrong too: the chain's validation link answers the constraints
// before the handler and the idempotency link run, so only their
// violations are listed.
func TestInvalidRequests(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	webhooks := shebav1.NewWebhookServiceClient(e.conn)

	// What some requests need: a page token of each listing, an endpoint
	// registered already, a key used already.
	e.seedSubscriptions(t, 3)
	subs, err := e.sub.ListSubscriptions(t.Context(), &shebav1.ListSubscriptionsRequest{PageSize: 1, Plan: "even"})
	if err != nil || subs.GetNextPageToken() == "" {
		t.Fatalf("ListSubscriptions: %v, %v; want a next page", subs, err)
	}
	subToken := subs.GetNextPageToken()
	const dupURL = "https://8.8.8.8/dup"
	for _, url := range []string{dupURL, "https://8.8.8.8/two"} {
		if _, err := webhooks.CreateWebhookEndpoint(t.Context(), &shebav1.CreateWebhookEndpointRequest{Url: url, EventTypes: []string{"account.created"}}); err != nil {
			t.Fatalf("CreateWebhookEndpoint: %v", err)
		}
	}
	endpoints, err := webhooks.ListWebhookEndpoints(t.Context(), &shebav1.ListWebhookEndpointsRequest{PageSize: 1})
	if err != nil || endpoints.GetNextPageToken() == "" {
		t.Fatalf("ListWebhookEndpoints: %v, %v; want a next page", endpoints, err)
	}
	endpointToken := endpoints.GetNextPageToken()
	keyed := e.do(t, http.MethodPost, "/v1/accounts", `{"username":"keyed","password":"password1"}`, "Idempotency-Key", "used")
	wantCode(t, keyed, http.StatusOK)

	long := strings.Repeat("a", 65)
	longPassword := strings.Repeat("p", 257)
	longURL := "https://8.8.8.8/" + strings.Repeat("a", 2100)
	longDescription := strings.Repeat("d", 257)
	longType := strings.Repeat("t", 1000)
	const (
		createAccount = shebav1.AccountService_CreateAccount_FullMethodName
		login         = shebav1.AccountService_Login_FullMethodName
		getAccount    = shebav1.AccountService_GetAccount_FullMethodName
		createSub     = shebav1.SubscriptionService_CreateSubscription_FullMethodName
		getSub        = shebav1.SubscriptionService_GetSubscription_FullMethodName
		cancelSub     = shebav1.SubscriptionService_CancelSubscription_FullMethodName
		listSubs      = shebav1.SubscriptionService_ListSubscriptions_FullMethodName
		createHook    = shebav1.WebhookService_CreateWebhookEndpoint_FullMethodName
		getHook       = shebav1.WebhookService_GetWebhookEndpoint_FullMethodName
		listHooks     = shebav1.WebhookService_ListWebhookEndpoints_FullMethodName
		deleteHook    = shebav1.WebhookService_DeleteWebhookEndpoint_FullMethodName
		rotateHook    = shebav1.WebhookService_RotateWebhookSecret_FullMethodName
		listDeliv     = shebav1.WebhookService_ListWebhookDeliveries_FullMethodName
	)
	credentials := func(method, path, username, password string) (string, proto.Message, string, string, string) {
		body := fmt.Sprintf(`{"username":%q,"password":%q}`, username, password)
		if method == login {
			return method, &shebav1.LoginRequest{Username: username, Password: password}, http.MethodPost, path, body
		}
		return method, &shebav1.CreateAccountRequest{Username: username, Password: password}, http.MethodPost, path, body
	}
	create := func(username, password string) (string, proto.Message, string, string, string) {
		return credentials(createAccount, "/v1/accounts", username, password)
	}
	subscribe := func(id, plan string) (string, proto.Message, string, string, string) {
		return createSub, &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: plan}, http.MethodPost, "/v1/accounts/" + id + "/subscription", fmt.Sprintf(`{"plan":%q}`, plan)
	}
	hook := func(url string, types []string, description string) (string, proto.Message, string, string, string) {
		req := &shebav1.CreateWebhookEndpointRequest{Url: url, EventTypes: types, Description: description}
		body, err := protojson.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		return createHook, req, http.MethodPost, "/v1/webhookEndpoints", string(body)
	}
	listSubscriptions := func(size int32, plan, token string) (string, proto.Message, string, string, string) {
		return listSubs, &shebav1.ListSubscriptionsRequest{PageSize: size, Plan: plan, PageToken: token}, http.MethodGet,
			fmt.Sprintf("/v1/subscriptions?page_size=%d&plan=%s&page_token=%s", size, plan, token), ""
	}
	at := func(method string, req proto.Message, verb, path, body string) (string, proto.Message, string, string, string) {
		return method, req, verb, path, body
	}
	request := func(name string, call func() (string, proto.Message, string, string, string), fields ...string) invalidRequest {
		r := invalidRequest{name: name, fields: fields}
		r.method, r.req, r.verb, r.path, r.body = call()
		return r
	}
	with := func(r invalidRequest, edit func(*invalidRequest)) invalidRequest {
		edit(&r)
		return r
	}
	three := []string{"account.created", "subscription.created", "subscription.canceled"}

	tests := []invalidRequest{
		request("short username", func() (string, proto.Message, string, string, string) { return create("ab", "password1") }, "username"),
		request("long username", func() (string, proto.Message, string, string, string) { return create(long, "password1") }, "username"),
		request("upper case username", func() (string, proto.Message, string, string, string) { return create("Alice", "password1") }, "username"),
		request("username with space", func() (string, proto.Message, string, string, string) { return create("al ice", "password1") }, "username"),
		request("empty username", func() (string, proto.Message, string, string, string) { return create("", "password1") }, "username"),
		request("short password", func() (string, proto.Message, string, string, string) { return create("alice", "1234567") }, "password"),
		request("long password", func() (string, proto.Message, string, string, string) { return create("alice", longPassword) }, "password"),
		request("bad username and password", func() (string, proto.Message, string, string, string) { return create("Al", "short") }, "username", "password"),
		request("connect: username NOT VALID!", func() (string, proto.Message, string, string, string) { return create("NOT VALID!", "password1") }, "username"),
		request("login: short username", func() (string, proto.Message, string, string, string) {
			return credentials(login, "/v1/accounts:login", "c", "s3cret-pass")
		}, "username"),
		request("login: no password", func() (string, proto.Message, string, string, string) {
			return at(login, &shebav1.LoginRequest{Username: "carol"}, http.MethodPost, "/v1/accounts:login", `{"username":"carol"}`)
		}, "password"),
		request("login: long password", func() (string, proto.Message, string, string, string) {
			return credentials(login, "/v1/accounts:login", "nobody", longPassword)
		}, "password"),
		request("get account: not a UUID", func() (string, proto.Message, string, string, string) {
			return at(getAccount, &shebav1.GetAccountRequest{AccountId: "not-a-uuid"}, http.MethodGet, "/v1/accounts/not-a-uuid", "")
		}, "account_id"),
		request("get account: UUID without dashes", func() (string, proto.Message, string, string, string) {
			return at(getAccount, &shebav1.GetAccountRequest{AccountId: "0123456789abcdef0123456789abcdef"}, http.MethodGet, "/v1/accounts/0123456789abcdef0123456789abcdef", "")
		}, "account_id"),
		request("get account: nope", func() (string, proto.Message, string, string, string) {
			return at(getAccount, &shebav1.GetAccountRequest{AccountId: "nope"}, http.MethodGet, "/v1/accounts/nope", "")
		}, "account_id"),

		request("subscribe: bad plan on unknown account", func() (string, proto.Message, string, string, string) { return subscribe(unknownID, "Pro Plan") }, "plan"),
		request("subscribe: empty plan", func() (string, proto.Message, string, string, string) { return subscribe(unknownID, "") }, "plan"),
		request("subscribe: long plan", func() (string, proto.Message, string, string, string) { return subscribe(unknownID, long) }, "plan"),
		request("subscribe: bad account id", func() (string, proto.Message, string, string, string) { return subscribe("42", "pro") }, "account_id"),
		request("subscribe: bad id and plan", func() (string, proto.Message, string, string, string) { return subscribe("42", "Pro!") }, "account_id", "plan"),
		request("get subscription: bad id", func() (string, proto.Message, string, string, string) {
			return at(getSub, &shebav1.GetSubscriptionRequest{AccountId: "42"}, http.MethodGet, "/v1/accounts/42/subscription", "")
		}, "account_id"),
		request("cancel subscription: bad id", func() (string, proto.Message, string, string, string) {
			return at(cancelSub, &shebav1.CancelSubscriptionRequest{AccountId: "nope"}, http.MethodPost, "/v1/accounts/nope/subscription:cancel", "")
		}, "account_id"),
		request("cancel subscription: id without hyphens", func() (string, proto.Message, string, string, string) {
			id := strings.ReplaceAll(unknownID, "-", "")
			return at(cancelSub, &shebav1.CancelSubscriptionRequest{AccountId: id}, http.MethodPost, "/v1/accounts/"+id+"/subscription:cancel", "")
		}, "account_id"),
		request("list subscriptions: negative page size", func() (string, proto.Message, string, string, string) { return listSubscriptions(-1, "", "") }, "page_size"),
		request("list subscriptions: bad plan", func() (string, proto.Message, string, string, string) { return listSubscriptions(0, "Not-A-Plan!", "") }, "plan"),
		request("list subscriptions: garbage token", func() (string, proto.Message, string, string, string) { return listSubscriptions(0, "", "garbage") }, "page_token"),
		request("list subscriptions: token of another filter", func() (string, proto.Message, string, string, string) { return listSubscriptions(0, "odd", subToken) }, "page_token"),
		request("list subscriptions: token without its filter", func() (string, proto.Message, string, string, string) { return listSubscriptions(0, "", subToken) }, "page_token"),
		// page_token is the handler's, which the request does not reach.
		request("list subscriptions: negative size, bad plan, made-up token", func() (string, proto.Message, string, string, string) {
			return listSubscriptions(-1, "Pro!", "made-up")
		}, "page_size", "plan"),

		request("webhook: unknown event type", func() (string, proto.Message, string, string, string) {
			return hook("https://8.8.8.8/a", []string{"account.deleted"}, "")
		}, "event_types[0]"),
		request("webhook: event type twice", func() (string, proto.Message, string, string, string) {
			return hook("https://8.8.8.8/a", []string{"account.created", "account.created"}, "")
		}, "event_types[1]"),
		request("webhook: no event types", func() (string, proto.Message, string, string, string) { return hook("https://8.8.8.8/a", nil, "") }, "event_types"),
		request("webhook: no url", func() (string, proto.Message, string, string, string) {
			return hook("", []string{"account.created"}, "")
		}, "url"),
		request("webhook: bad url", func() (string, proto.Message, string, string, string) {
			return hook("http://%zz", []string{"account.created"}, "")
		}, "url"),
		request("webhook: relative url", func() (string, proto.Message, string, string, string) {
			return hook("/hook", []string{"account.created"}, "")
		}, "url"),
		request("webhook: ftp scheme", func() (string, proto.Message, string, string, string) {
			return hook("ftp://8.8.8.8/a", []string{"account.created"}, "")
		}, "url"),
		request("webhook: file scheme", func() (string, proto.Message, string, string, string) {
			return hook("file:///etc/passwd", []string{"account.created"}, "")
		}, "url"),
		request("webhook: user in url", func() (string, proto.Message, string, string, string) {
			return hook("https://me:pw@8.8.8.8/a", []string{"account.created"}, "")
		}, "url"),
		request("webhook: fragment in url", func() (string, proto.Message, string, string, string) {
			return hook("https://8.8.8.8/a#top", []string{"account.created"}, "")
		}, "url"),
		request("webhook: url without host", func() (string, proto.Message, string, string, string) {
			return hook("https://:443/a", []string{"account.created"}, "")
		}, "url"),
		request("webhook: url too long", func() (string, proto.Message, string, string, string) {
			return hook(longURL, []string{"account.created"}, "")
		}, "url"),
		request("webhook: duplicate endpoint", func() (string, proto.Message, string, string, string) {
			return hook(dupURL, []string{"subscription.created"}, "")
		}, "url"),
		request("webhook: description too long", func() (string, proto.Message, string, string, string) {
			return hook("https://8.8.8.8/b", []string{"account.created"}, longDescription)
		}, "description"),
		request("webhook: every field bad", func() (string, proto.Message, string, string, string) {
			return hook("ftp://example.com/hook", []string{"account.created", "account.deleted", "account.created"}, longDescription)
		}, "url", "event_types[1]", "event_types[2]", "description"),
		request("webhook: no url, no types", func() (string, proto.Message, string, string, string) { return hook("", nil, "") }, "url", "event_types"),
		request("webhook: one long unknown type", func() (string, proto.Message, string, string, string) {
			return hook("https://8.8.8.8/a", []string{longType}, "")
		}, "event_types[0]"),
		request("webhook: long duplicates", func() (string, proto.Message, string, string, string) {
			return hook("https://8.8.8.8/a", []string{longType, longType}, "")
		}, "event_types[0]", "event_types[1]"),
		request("webhook: more types than there are", func() (string, proto.Message, string, string, string) {
			return hook("https://8.8.8.8/a", append(three, "account.created"), "")
		}, "event_types"),
		with(request("webhook: private target", func() (string, proto.Message, string, string, string) {
			return hook("http://127.0.0.1/hook", []string{"account.created"}, "")
		}, "url"), func(r *invalidRequest) { r.why = reason.WebhookURLNotAllowed }),
		request("get webhook: not a UUID", func() (string, proto.Message, string, string, string) {
			return at(getHook, &shebav1.GetWebhookEndpointRequest{EndpointId: "not-a-uuid"}, http.MethodGet, "/v1/webhookEndpoints/not-a-uuid", "")
		}, "endpoint_id"),
		request("delete webhook: not a UUID", func() (string, proto.Message, string, string, string) {
			return at(deleteHook, &shebav1.DeleteWebhookEndpointRequest{EndpointId: "not-a-uuid"}, http.MethodDelete, "/v1/webhookEndpoints/not-a-uuid", "")
		}, "endpoint_id"),
		request("rotate secret: not a UUID", func() (string, proto.Message, string, string, string) {
			return at(rotateHook, &shebav1.RotateWebhookSecretRequest{EndpointId: "not-a-uuid"}, http.MethodPost, "/v1/webhookEndpoints/not-a-uuid:rotateSecret", "")
		}, "endpoint_id"),
		request("list webhooks: negative page size", func() (string, proto.Message, string, string, string) {
			return at(listHooks, &shebav1.ListWebhookEndpointsRequest{PageSize: -1}, http.MethodGet, "/v1/webhookEndpoints?page_size=-1", "")
		}, "page_size"),
		request("list webhooks: garbage token", func() (string, proto.Message, string, string, string) {
			return at(listHooks, &shebav1.ListWebhookEndpointsRequest{PageToken: "abc"}, http.MethodGet, "/v1/webhookEndpoints?page_token=abc", "")
		}, "page_token"),
		request("list webhooks: token of another listing, negative size", func() (string, proto.Message, string, string, string) {
			return at(listHooks, &shebav1.ListWebhookEndpointsRequest{PageSize: -5, PageToken: subToken}, http.MethodGet, "/v1/webhookEndpoints?page_size=-5&page_token="+subToken, "")
		}, "page_size"),
		request("list deliveries: bad id and size", func() (string, proto.Message, string, string, string) {
			return at(listDeliv, &shebav1.ListWebhookDeliveriesRequest{EndpointId: "42", PageSize: -1}, http.MethodGet, "/v1/webhookEndpoints/42/deliveries?page_size=-1", "")
		}, "endpoint_id", "page_size"),
		request("list deliveries: token of another listing", func() (string, proto.Message, string, string, string) {
			return at(listDeliv, &shebav1.ListWebhookDeliveriesRequest{EndpointId: unknownID, PageToken: endpointToken}, http.MethodGet,
				"/v1/webhookEndpoints/"+unknownID+"/deliveries?page_token="+endpointToken, "")
		}, "page_token"),

		// With an idempotency key, malformed or used already by another
		// request: validation runs before the idempotency link.
		with(request("subscribe: bad plan, malformed key", func() (string, proto.Message, string, string, string) { return subscribe(unknownID, "Pro!") }, "plan"),
			func(r *invalidRequest) { r.header = []string{"Idempotency-Key", `"open`} }),
		with(request("create account: bad username, key used already", func() (string, proto.Message, string, string, string) { return create("Keyed!", "password1") }, "username"),
			func(r *invalidRequest) { r.header = []string{"Idempotency-Key", "used"} }),
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			code, httpCode, why := test.code, test.httpCode, test.why
			if code == 0 {
				code = codes.InvalidArgument
			}
			if httpCode == 0 {
				httpCode = http.StatusBadRequest
			}
			if why == "" {
				why = reason.InvalidArgument
			}
			check := func(transport string, st *status.Status) {
				t.Helper()
				fields, descriptions := violationsOf(st)
				t.Logf("%s: %v %s %q %q", transport, st.Code(), strings.Join(resttest.ErrorInfos(st), ","), st.Message(), descriptions)
				if st.Code() != code {
					t.Errorf("%s: got code %v, want %v", transport, st.Code(), code)
				}
				if diff := cmp.Diff(test.fields, fields); diff != "" {
					t.Errorf("%s: field violations (-want +got):\n%s", transport, diff)
				}
				if infos := resttest.ErrorInfos(st); len(infos) != 1 || infos[0] != "sheba/"+why {
					t.Errorf("%s: got ErrorInfo %v, want one, sheba/%s", transport, infos, why)
				}
			}

			ctx := t.Context()
			for i := 0; i+1 < len(test.header); i += 2 {
				ctx = metadata.AppendToOutgoingContext(ctx, strings.ToLower(test.header[i]), test.header[i+1])
			}
			err := e.conn.Invoke(ctx, test.method, test.req, new(emptypb.Empty))
			check("gRPC", status.Convert(err))

			r := e.do(t, test.verb, test.path, test.body, test.header...)
			if r.Code != httpCode {
				t.Errorf("REST: got HTTP %d, want %d", r.Code, httpCode)
			}
			check("REST", status.FromProto(r.Status(t)))

			body, err := protojson.Marshal(test.req)
			if err != nil {
				t.Fatal(err)
			}
			// Connect answers INVALID_ARGUMENT with 400, whatever the reason.
			r = e.do(t, http.MethodPost, test.method, string(body), test.header...)
			if r.Code != http.StatusBadRequest {
				t.Errorf("Connect: got HTTP %d, want 400", r.Code)
			}
			check("Connect", resttest.ConnectStatus(t, r.Body))
		})
	}
}

// violationsOf returns the fields and descriptions of the field violations
// of st's BadRequest, in order.
func violationsOf(st *status.Status) (fields, descriptions []string) {
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				fields = append(fields, v.GetField())
				descriptions = append(descriptions, v.GetDescription())
			}
		}
	}
	return fields, descriptions
}
