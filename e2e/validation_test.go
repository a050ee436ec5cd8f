package e2e

import (
	"fmt"
	"net/http"
	"slices"
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
	"github.com/shebasvc/sheba/server"
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
	// Each builder returns the request on every transport; named gives it
	// its name and the fields its answer names.
	at := func(method string, req proto.Message, verb, path, body string) invalidRequest {
		return invalidRequest{method: method, req: req, verb: verb, path: path, body: body}
	}
	named := func(name string, r invalidRequest, fields ...string) invalidRequest {
		r.name, r.fields = name, fields
		return r
	}
	create := func(username, password string) invalidRequest {
		return at(createAccount, &shebav1.CreateAccountRequest{Username: username, Password: password},
			http.MethodPost, "/v1/accounts", fmt.Sprintf(`{"username":%q,"password":%q}`, username, password))
	}
	logIn := func(username, password string) invalidRequest {
		return at(login, &shebav1.LoginRequest{Username: username, Password: password},
			http.MethodPost, "/v1/accounts:login", fmt.Sprintf(`{"username":%q,"password":%q}`, username, password))
	}
	getAccountOf := func(id string) invalidRequest {
		return at(getAccount, &shebav1.GetAccountRequest{AccountId: id}, http.MethodGet, "/v1/accounts/"+id, "")
	}
	subscribe := func(id, plan string) invalidRequest {
		return at(createSub, &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: plan},
			http.MethodPost, "/v1/accounts/"+id+"/subscription", fmt.Sprintf(`{"plan":%q}`, plan))
	}
	listSubscriptions := func(size int32, plan, token string) invalidRequest {
		return at(listSubs, &shebav1.ListSubscriptionsRequest{PageSize: size, Plan: plan, PageToken: token}, http.MethodGet,
			fmt.Sprintf("/v1/subscriptions?page_size=%d&plan=%s&page_token=%s", size, plan, token), "")
	}
	hook := func(url string, types []string, description string) invalidRequest {
		req := &shebav1.CreateWebhookEndpointRequest{Url: url, EventTypes: types, Description: description}
		body, err := protojson.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		return at(createHook, req, http.MethodPost, "/v1/webhookEndpoints", string(body))
	}
	created := []string{"account.created"}
	listHooksOf := func(size int32, token string) invalidRequest {
		return at(listHooks, &shebav1.ListWebhookEndpointsRequest{PageSize: size, PageToken: token}, http.MethodGet,
			fmt.Sprintf("/v1/webhookEndpoints?page_size=%d&page_token=%s", size, token), "")
	}
	listDeliveries := func(id string, size int32, token string) invalidRequest {
		return at(listDeliv, &shebav1.ListWebhookDeliveriesRequest{EndpointId: id, PageSize: size, PageToken: token}, http.MethodGet,
			fmt.Sprintf("/v1/webhookEndpoints/%s/deliveries?page_size=%d&page_token=%s", id, size, token), "")
	}
	withHeader := func(r invalidRequest, name, value string) invalidRequest {
		r.header = []string{name, value}
		return r
	}
	noHyphens := strings.ReplaceAll(unknownID, "-", "")
	every := server.EventTypes()
	private := named("webhook: private target", hook("http://127.0.0.1/hook", created, ""), "url")
	private.why = reason.WebhookURLNotAllowed

	tests := []invalidRequest{
		named("short username", create("ab", "password1"), "username"),
		named("long username", create(long, "password1"), "username"),
		named("upper case username", create("Alice", "password1"), "username"),
		named("username with space", create("al ice", "password1"), "username"),
		named("empty username", create("", "password1"), "username"),
		named("short password", create("alice", "1234567"), "password"),
		named("long password", create("alice", longPassword), "password"),
		named("bad username and password", create("Al", "short"), "username", "password"),
		named("username NOT VALID!", create("NOT VALID!", "password1"), "username"),
		named("login: short username", logIn("c", "s3cret-pass"), "username"),
		named("login: no password", at(login, &shebav1.LoginRequest{Username: "carol"}, http.MethodPost, "/v1/accounts:login", `{"username":"carol"}`), "password"),
		named("login: long password", logIn("nobody", longPassword), "password"),
		named("get account: not a UUID", getAccountOf("not-a-uuid"), "account_id"),
		named("get account: UUID without dashes", getAccountOf("0123456789abcdef0123456789abcdef"), "account_id"),
		named("get account: nope", getAccountOf("nope"), "account_id"),

		named("subscribe: bad plan on unknown account", subscribe(unknownID, "Pro Plan"), "plan"),
		named("subscribe: empty plan", subscribe(unknownID, ""), "plan"),
		named("subscribe: long plan", subscribe(unknownID, long), "plan"),
		named("subscribe: bad account id", subscribe("42", "pro"), "account_id"),
		named("subscribe: bad id and plan", subscribe("42", "Pro!"), "account_id", "plan"),
		named("get subscription: bad id", at(getSub, &shebav1.GetSubscriptionRequest{AccountId: "42"}, http.MethodGet, "/v1/accounts/42/subscription", ""), "account_id"),
		named("cancel subscription: bad id", at(cancelSub, &shebav1.CancelSubscriptionRequest{AccountId: "nope"},
			http.MethodPost, "/v1/accounts/nope/subscription:cancel", ""), "account_id"),
		named("cancel subscription: id without hyphens", at(cancelSub, &shebav1.CancelSubscriptionRequest{AccountId: noHyphens},
			http.MethodPost, "/v1/accounts/"+noHyphens+"/subscription:cancel", ""), "account_id"),
		named("list subscriptions: negative page size", listSubscriptions(-1, "", ""), "page_size"),
		named("list subscriptions: bad plan", listSubscriptions(0, "Not-A-Plan!", ""), "plan"),
		named("list subscriptions: garbage token", listSubscriptions(0, "", "garbage"), "page_token"),
		named("list subscriptions: token of another filter", listSubscriptions(0, "odd", subToken), "page_token"),
		named("list subscriptions: token without its filter", listSubscriptions(0, "", subToken), "page_token"),
		// page_token is the handler's, which the request does not reach.
		named("list subscriptions: negative size, bad plan, made-up token", listSubscriptions(-1, "Pro!", "made-up"), "page_size", "plan"),

		named("webhook: unknown event type", hook("https://8.8.8.8/a", []string{"account.deleted"}, ""), "event_types[0]"),
		named("webhook: event type twice", hook("https://8.8.8.8/a", []string{"account.created", "account.created"}, ""), "event_types[1]"),
		named("webhook: no event types", hook("https://8.8.8.8/a", nil, ""), "event_types"),
		named("webhook: no url", hook("", created, ""), "url"),
		named("webhook: bad url", hook("http://%zz", created, ""), "url"),
		named("webhook: relative url", hook("/hook", created, ""), "url"),
		named("webhook: ftp scheme", hook("ftp://8.8.8.8/a", created, ""), "url"),
		named("webhook: file scheme", hook("file:///etc/passwd", created, ""), "url"),
		named("webhook: user in url", hook("https://me:pw@8.8.8.8/a", created, ""), "url"),
		named("webhook: fragment in url", hook("https://8.8.8.8/a#top", created, ""), "url"),
		named("webhook: url without host", hook("https://:443/a", created, ""), "url"),
		named("webhook: url too long", hook(longURL, created, ""), "url"),
		named("webhook: duplicate endpoint", hook(dupURL, []string{"subscription.created"}, ""), "url"),
		named("webhook: description too long", hook("https://8.8.8.8/b", created, longDescription), "description"),
		named("webhook: every field bad", hook("ftp://example.com/hook", []string{"account.created", "account.deleted", "account.created"}, longDescription),
			"url", "event_types[1]", "event_types[2]", "description"),
		named("webhook: no url, no types", hook("", nil, ""), "url", "event_types"),
		named("webhook: one long unknown type", hook("https://8.8.8.8/a", []string{longType}, ""), "event_types[0]"),
		named("webhook: long duplicates", hook("https://8.8.8.8/a", []string{longType, longType}, ""), "event_types[0]", "event_types[1]"),
		named("webhook: more types than there are", hook("https://8.8.8.8/a", append(slices.Clone(every), "account.created"), ""), "event_types"),
		private,
		named("get webhook: not a UUID", at(getHook, &shebav1.GetWebhookEndpointRequest{EndpointId: "not-a-uuid"},
			http.MethodGet, "/v1/webhookEndpoints/not-a-uuid", ""), "endpoint_id"),
		named("delete webhook: not a UUID", at(deleteHook, &shebav1.DeleteWebhookEndpointRequest{EndpointId: "not-a-uuid"},
			http.MethodDelete, "/v1/webhookEndpoints/not-a-uuid", ""), "endpoint_id"),
		named("rotate secret: not a UUID", at(rotateHook, &shebav1.RotateWebhookSecretRequest{EndpointId: "not-a-uuid"},
			http.MethodPost, "/v1/webhookEndpoints/not-a-uuid:rotateSecret", ""), "endpoint_id"),
		named("list webhooks: negative page size", listHooksOf(-1, ""), "page_size"),
		named("list webhooks: garbage token", listHooksOf(0, "abc"), "page_token"),
		// As above, page_token is the handler's.
		named("list webhooks: token of another listing, negative size", listHooksOf(-5, subToken), "page_size"),
		named("list deliveries: bad id and size", listDeliveries("42", -1, ""), "endpoint_id", "page_size"),
		named("list deliveries: token of another listing", listDeliveries(unknownID, 0, endpointToken), "page_token"),

		// With an idempotency key, malformed or used already by another
		// request: validation runs before the idempotency link.
		withHeader(named("subscribe: bad plan, malformed key", subscribe(unknownID, "Pro!"), "plan"), "Idempotency-Key", `"open`),
		withHeader(named("create account: bad username, key used already", create("Keyed!", "password1"), "username"), "Idempotency-Key", "used"),
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
