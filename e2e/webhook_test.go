package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/internal/app"
	"github.com/shebasvc/sheba/webhooks/ssrf/ssrftest"
)

const otherKey, otherKeyID = "other-key-0123456789abcdefghijklmnopqrs", "other"

// allowPrivate lets endpoints point at the test receivers on 127.0.0.1, and
// adds a second API key.
func allowPrivate(c *config.Config) {
	c.Webhooks.AllowPrivateNetworks = true
	c.Auth.Keys = append(c.Auth.Keys, keyEntry(otherKeyID, otherKey))
}

func TestWebhookEndpointCRUD(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, allowPrivate)

	r := e.do(t, http.MethodPost, "/v1/webhookEndpoints",
		`{"url":"http://127.0.0.1:1/hook","eventTypes":["subscription.created","account.created"],"description":"billing"}`)
	wantCode(t, r, http.StatusOK)
	created := r.JSON(t)
	id, _ := created["id"].(string)
	secret, _ := created["secret"].(string)
	if len(id) != 36 || !strings.HasPrefix(secret, "whsec_") || len(secret) != len("whsec_")+44 {
		t.Fatalf("create: got %s, want an id and a whsec_ secret of 32 bytes", r.Body)
	}
	if created["state"] != "ENABLED" || created["url"] != "http://127.0.0.1:1/hook" || created["description"] != "billing" ||
		fmt.Sprint(created["eventTypes"]) != "[subscription.created account.created]" || created["createTime"] == nil {
		t.Errorf("create: got %s, want the endpoint as sent, ENABLED", r.Body)
	}

	// The secret is shown only on create: absent, not empty, elsewhere.
	r = e.do(t, http.MethodGet, "/v1/webhookEndpoints/"+id, "")
	wantCode(t, r, http.StatusOK)
	got := r.JSON(t)
	if got["id"] != id {
		t.Errorf("get: got %s, want the endpoint %s", r.Body, id)
	}
	wantNoSecret(t, "get (JSON)", got)
	r = e.do(t, http.MethodGet, "/v1/webhookEndpoints/"+id, "", "Accept", "application/cbor")
	wantCode(t, r, http.StatusOK)
	wantNoSecret(t, "get (CBOR)", cborObject(t, r.Body))

	// Another key sees nothing of it.
	other := []string{"X-Api-Key", otherKey}
	wantRESTError(t, e.do(t, http.MethodGet, "/v1/webhookEndpoints/"+id, "", other...), http.StatusNotFound, codes.NotFound, "")
	wantRESTError(t, e.do(t, http.MethodGet, "/v1/webhookEndpoints/"+id+"/deliveries", "", other...), http.StatusNotFound, codes.NotFound, "")
	wantRESTError(t, e.do(t, http.MethodDelete, "/v1/webhookEndpoints/"+id, "", other...), http.StatusNotFound, codes.NotFound, "")
	r = e.do(t, http.MethodGet, "/v1/webhookEndpoints", "", other...)
	wantCode(t, r, http.StatusOK)
	if got := r.JSON(t); len(got["webhookEndpoints"].([]any)) != 0 || got["nextPageToken"] != "" {
		t.Errorf("list by another key: got %s, want an empty list", r.Body)
	}

	// Paging: three more endpoints, pages of two, newest first.
	ids := []string{id}
	for i := range 3 {
		r := e.do(t, http.MethodPost, "/v1/webhookEndpoints", fmt.Sprintf(`{"url":"http://127.0.0.1:1/hook%d","eventTypes":["account.created"]}`, i))
		wantCode(t, r, http.StatusOK)
		ids = append(ids, r.JSON(t)["id"].(string))
	}
	var listed []string
	token := ""
	for page := 0; ; page++ {
		r := e.do(t, http.MethodGet, "/v1/webhookEndpoints?page_size=2&page_token="+token, "")
		wantCode(t, r, http.StatusOK)
		m := r.JSON(t)
		for _, ep := range m["webhookEndpoints"].([]any) {
			listed = append(listed, ep.(map[string]any)["id"].(string))
		}
		token = m["nextPageToken"].(string)
		if token == "" || page > 3 {
			break
		}
		// A token is bound to its key.
		wantRESTError(t, e.do(t, http.MethodGet, "/v1/webhookEndpoints?page_token="+token, "", other...), http.StatusBadRequest, codes.InvalidArgument, "page_token")
	}
	want := []string{ids[3], ids[2], ids[1], ids[0]}
	if fmt.Sprint(listed) != fmt.Sprint(want) {
		t.Errorf("listed %v, want %v (newest first)", listed, want)
	}
	r = e.do(t, http.MethodGet, "/v1/webhookEndpoints", "")
	wantCode(t, r, http.StatusOK)
	for _, ep := range r.JSON(t)["webhookEndpoints"].([]any) {
		wantNoSecret(t, "list (JSON)", ep.(map[string]any))
	}
	r = e.do(t, http.MethodGet, "/v1/webhookEndpoints", "", "Accept", "application/cbor")
	wantCode(t, r, http.StatusOK)
	for _, ep := range cborObject(t, r.Body)["webhookEndpoints"].([]any) {
		wantNoSecret(t, "list (CBOR)", ep.(map[string]any))
	}

	r = e.do(t, http.MethodGet, "/v1/webhookEndpoints/"+id+"/deliveries", "")
	wantCode(t, r, http.StatusOK)
	if got := r.JSON(t); len(got["deliveries"].([]any)) != 0 || got["nextPageToken"] != "" {
		t.Errorf("deliveries: got %s, want none", r.Body)
	}

	r = e.do(t, http.MethodDelete, "/v1/webhookEndpoints/"+id, "")
	wantCode(t, r, http.StatusOK)
	if len(r.JSON(t)) != 0 {
		t.Errorf("delete: got body %s, want {}", r.Body)
	}
	wantRESTError(t, e.do(t, http.MethodGet, "/v1/webhookEndpoints/"+id, ""), http.StatusNotFound, codes.NotFound, "")
	wantRESTError(t, e.do(t, http.MethodDelete, "/v1/webhookEndpoints/"+id, ""), http.StatusNotFound, codes.NotFound, "")
}

func TestWebhookEndpointBadInput(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, allowPrivate)
	wantCode(t, e.do(t, http.MethodPost, "/v1/webhookEndpoints", `{"url":"http://127.0.0.1:1/dup","eventTypes":["account.created"]}`), http.StatusOK)
	for _, test := range []struct {
		name, body, field string
	}{
		{"unknown event type", `{"url":"http://127.0.0.1:1/a","eventTypes":["account.deleted"]}`, "event_types[0]"},
		{"event type twice", `{"url":"http://127.0.0.1:1/a","eventTypes":["account.created","account.created"]}`, "event_types[1]"},
		{"no event types", `{"url":"http://127.0.0.1:1/a","eventTypes":[]}`, "event_types"},
		{"no url", `{"eventTypes":["account.created"]}`, "url"},
		{"bad url", `{"url":"http://%zz","eventTypes":["account.created"]}`, "url"},
		{"relative url", `{"url":"/hook","eventTypes":["account.created"]}`, "url"},
		{"ftp scheme", `{"url":"ftp://127.0.0.1/a","eventTypes":["account.created"]}`, "url"},
		{"file scheme", `{"url":"file:///etc/passwd","eventTypes":["account.created"]}`, "url"},
		{"url too long", `{"url":"http://127.0.0.1:1/` + strings.Repeat("a", 2100) + `","eventTypes":["account.created"]}`, "url"},
		{"duplicate endpoint", `{"url":"http://127.0.0.1:1/dup","eventTypes":["subscription.created"]}`, "url"},
		{"description too long", `{"url":"http://127.0.0.1:1/b","eventTypes":["account.created"],"description":"` + strings.Repeat("d", 257) + `"}`, "description"},
	} {
		t.Run(test.name, func(t *testing.T) {
			wantRESTError(t, e.do(t, http.MethodPost, "/v1/webhookEndpoints", test.body), http.StatusBadRequest, codes.InvalidArgument, test.field)
		})
	}
	wantRESTError(t, e.do(t, http.MethodGet, "/v1/webhookEndpoints/not-a-uuid", ""), http.StatusBadRequest, codes.InvalidArgument, "endpoint_id")
	wantRESTError(t, e.do(t, http.MethodGet, "/v1/webhookEndpoints?page_size=-1", ""), http.StatusBadRequest, codes.InvalidArgument, "page_size")
	wantRESTError(t, e.do(t, http.MethodGet, "/v1/webhookEndpoints?page_token=abc", ""), http.StatusBadRequest, codes.InvalidArgument, "page_token")
}

// TestWebhookEndpointBadInputBounded sends event types that are long or
// many: the answer quotes at most reason.MaxQuoted bytes of each and lists
// a bounded number of violations, so it stays small on both transports
// whatever was sent (gRPC messages of up to a megabyte are let in for it).
func TestWebhookEndpointBadInputBounded(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, allowPrivate, func(c *config.Config) { c.GRPC.MaxRecvBytes = 1 << 20 })
	many := make([]string, 20000)
	for i := range many {
		many[i] = fmt.Sprint("x", i)
	}
	for _, test := range []struct {
		name  string
		types []string
		field string // of the first violation
	}{
		{"one long unknown type", []string{strings.Repeat("t", 500_000)}, "event_types[0]"},
		// More than there are event types: refused as too many, before
		// each is looked at.
		{"many unknown types", many, "event_types"},
		{"many long duplicates", slices.Repeat([]string{"account.created", strings.Repeat("d", 1000)}, 200), "event_types"},
		{"long duplicates", []string{strings.Repeat("d", 1000), strings.Repeat("d", 1000)}, "event_types[0]"},
	} {
		t.Run(test.name, func(t *testing.T) {
			const limit = 4 << 10
			body, _ := json.Marshal(map[string]any{"url": "http://127.0.0.1:1/a", "eventTypes": test.types})
			r := e.do(t, http.MethodPost, "/v1/webhookEndpoints", string(body))
			wantRESTError(t, r, http.StatusBadRequest, codes.InvalidArgument, test.field)
			if len(r.Body) > limit {
				t.Errorf("REST answer of %d bytes, want at most %d", len(r.Body), limit)
			}
			_, err := shebav1.NewWebhookServiceClient(e.conn).CreateWebhookEndpoint(t.Context(),
				&shebav1.CreateWebhookEndpointRequest{Url: "http://127.0.0.1:1/a", EventTypes: test.types})
			wantGRPCError(t, err, codes.InvalidArgument, test.field)
			if n := proto.Size(status.Convert(err).Proto()); n > limit {
				t.Errorf("gRPC status of %d bytes, want at most %d", n, limit)
			}
		})
	}
}

// wantNoSecret fails the test if the endpoint ep, a JSON or CBOR object,
// has a secret field, empty or not.
func wantNoSecret(t *testing.T, what string, ep map[string]any) {
	t.Helper()
	if v, ok := ep["secret"]; ok {
		t.Errorf("%s: got secret %q, want no secret field", what, v)
	}
}

// cborMaps decodes CBOR maps, nested ones too, as a JSON decoder does.
var cborMaps, _ = cbor.DecOptions{DefaultMapType: reflect.TypeFor[map[string]any]()}.DecMode()

// cborObject decodes a CBOR map with text keys.
func cborObject(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := cborMaps.Unmarshal(b, &m); err != nil {
		t.Fatalf("body %x is not a CBOR map: %v", b, err)
	}
	return m
}

// TestWebhookSecretOnGRPC: on gRPC too, the secret is in the create answer
// only.
func TestWebhookSecretOnGRPC(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, allowPrivate)
	ctx := t.Context()
	c := shebav1.NewWebhookServiceClient(e.conn)
	created, err := c.CreateWebhookEndpoint(ctx, &shebav1.CreateWebhookEndpointRequest{Url: "http://127.0.0.1:1/hook", EventTypes: []string{"account.created"}})
	if err != nil {
		t.Fatal(err)
	}
	ep := created.GetWebhookEndpoint()
	if !hasSecret(ep) || !strings.HasPrefix(ep.GetSecret(), "whsec_") {
		t.Errorf("create: got secret %q, want a whsec_ secret", ep.GetSecret())
	}
	got, err := c.GetWebhookEndpoint(ctx, &shebav1.GetWebhookEndpointRequest{EndpointId: ep.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if hasSecret(got.GetWebhookEndpoint()) {
		t.Errorf("get: got secret %q, want none", got.GetWebhookEndpoint().GetSecret())
	}
	list, err := c.ListWebhookEndpoints(ctx, &shebav1.ListWebhookEndpointsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetWebhookEndpoints()); n != 1 {
		t.Fatalf("list: got %d endpoints, want 1", n)
	}
	if hasSecret(list.GetWebhookEndpoints()[0]) {
		t.Errorf("list: got secret %q, want none", list.GetWebhookEndpoints()[0].GetSecret())
	}
}

// hasSecret reports whether the message carries its secret field: on the
// wire, a field with presence is sent when set, even empty.
func hasSecret(ep *shebav1.WebhookEndpoint) bool {
	m := ep.ProtoReflect()
	return m.Has(m.Descriptor().Fields().ByName("secret"))
}

// TestWebhookEndpointTargetsRefused registers, with
// allow_private_networks false (the default), URLs whose target is not
// public or whose port is not allowed, by address and by names that a
// resolver of the test's answers: each is 400 WEBHOOK_URL_NOT_ALLOWED on
// both transports, and the answer names no address. No events are made in
// this server, so nothing is ever sent to a registered URL.
func TestWebhookEndpointTargetsRefused(t *testing.T) {
	t.Parallel()
	resolver := ssrftest.Resolver(map[string][]netip.Addr{
		"public.test": {netip.MustParseAddr("93.184.215.14")},
		"mapped.test": {netip.MustParseAddr("::ffff:127.0.0.1")},
		"rebind.test": {netip.MustParseAddr("10.0.0.1")},
		"mixed.test":  {netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("192.168.1.1")},
	})
	e := newTestEnvWith(t, nil, []app.Option{app.WithWebhookResolver(resolver)})
	c := shebav1.NewWebhookServiceClient(e.conn)
	for _, test := range []struct {
		url  string
		addr string // the address the answer must not name, if any
	}{
		{"http://127.0.0.1:8080/hook", "127.0.0.1"},
		{"http://10.0.0.1/hook", "10.0.0.1"},
		{"http://169.254.169.254/latest/meta-data", "169.254.169.254"},
		{"http://[::1]/hook", "::1"},
		{"http://[::127.0.0.1]/hook", "127.0.0.1"},
		{"http://[::ffff:127.0.0.1]/hook", "127.0.0.1"},
		{"http://[2002:7f00:1::]/hook", "2002:7f00:1::"},
		{"http://[64:ff9b:1::a00:1]/hook", "64:ff9b:1::a00:1"},
		{"http://[64:ff9b::a00:1]/hook", "64:ff9b::a00:1"},
		{"http://[2001:db8::1]/hook", "2001:db8::1"},
		{"http://[2001::1]/hook", "2001::1"},
		{"http://[fd00:ec2::254]/latest/meta-data", "fd00:ec2::254"},
		{"http://[fe80::1]/hook", "fe80::1"},
		{"http://168.63.129.16/hook", "168.63.129.16"},
		{"http://192.0.2.1/hook", "192.0.2.1"},
		{"http://198.51.100.1/hook", "198.51.100.1"},
		{"http://203.0.113.1/hook", "203.0.113.1"},
		{"http://192.88.99.1/hook", "192.88.99.1"},
		{"http://100.64.0.1/hook", "100.64.0.1"},
		{"http://8.8.8.8:25/", "8.8.8.8"},
		{"https://8.8.8.8:22/", "8.8.8.8"},
		{"http://8.8.8.8:1023/", "8.8.8.8"},
		{"http://8.8.8.8:0/", "8.8.8.8"},
		// localhost resolves from /etc/hosts.
		{"http://localhost:8080/hook", "127.0.0.1"},
		{"http://mapped.test:8080/hook", "127.0.0.1"},
		{"http://rebind.test/hook", "10.0.0.1"},
		{"http://mixed.test/hook", "192.168.1.1"},
		{"http://missing.test/hook", ""},
		{"http://public.test:9/hook", "93.184.215.14"},
	} {
		t.Run(test.url, func(t *testing.T) {
			body, _ := json.Marshal(map[string]any{"url": test.url, "eventTypes": []string{"account.created"}})
			r := e.do(t, http.MethodPost, "/v1/webhookEndpoints", string(body))
			wantRESTError(t, r, http.StatusBadRequest, codes.InvalidArgument, "url")
			wantRESTDetails(t, "REST", r, http.StatusBadRequest, reason.WebhookURLNotAllowed)
			if test.addr != "" && strings.Contains(string(r.Body), test.addr) {
				t.Errorf("REST: the answer %s names %s", r.Body, test.addr)
			}
			_, err := c.CreateWebhookEndpoint(t.Context(), &shebav1.CreateWebhookEndpointRequest{Url: test.url, EventTypes: []string{"account.created"}})
			st := wantGRPCDetails(t, "gRPC", err, nil, codes.InvalidArgument, reason.WebhookURLNotAllowed)
			if !hasViolation(st, "url") {
				t.Errorf("gRPC: no field violation for url in %v", st.Details())
			}
			if test.addr != "" && strings.Contains(fmt.Sprint(st.Proto()), test.addr) {
				t.Errorf("gRPC: the answer %v names %s", st.Proto(), test.addr)
			}
		})
	}
	// Public targets on allowed ports register.
	for _, url := range []string{
		"https://93.184.215.14/hook",
		"http://8.8.8.8:80/hook",
		"http://8.8.8.8:1024/hook",
		"http://[2606:4700:4700::1111]:65535/hook",
		"http://[::ffff:8.8.8.8]:8080/hook",
		"https://public.test/hook",
	} {
		e.createEndpoint(t, url, "account.created")
	}
	if n := e.count(t, `SELECT count(*) FROM webhook_events`); n != 0 {
		t.Errorf("got %d events, want none: nothing may be sent to these URLs", n)
	}
}

// TestWebhookEndpointLimit: a key holds at most webhooks.max_endpoints
// endpoints, also when it creates many at once; one more is 400
// FAILED_PRECONDITION WEBHOOK_ENDPOINT_LIMIT on both transports, another key
// is not affected, and a delete makes room.
func TestWebhookEndpointLimit(t *testing.T) {
	t.Parallel()
	const max = 5
	e := newTestEnv(t, allowPrivate, func(c *config.Config) { c.Webhooks.MaxEndpoints = max })
	ctx := t.Context()
	c := shebav1.NewWebhookServiceClient(e.conn)
	create := func(ctx context.Context, i int) (*shebav1.CreateWebhookEndpointResponse, error) {
		return c.CreateWebhookEndpoint(ctx, &shebav1.CreateWebhookEndpointRequest{
			Url: fmt.Sprintf("http://127.0.0.1:1/hook%d", i), EventTypes: []string{"account.created"},
		})
	}

	// Four times the limit at once.
	const tries = 4 * max
	errs := make([]error, tries)
	var wg sync.WaitGroup
	for i := range tries {
		wg.Go(func() { _, errs[i] = create(ctx, i) })
	}
	wg.Wait()
	created := 0
	for i, err := range errs {
		switch status.Code(err) {
		case codes.OK:
			created++
		case codes.FailedPrecondition:
		default:
			t.Errorf("create %d: got %v, want OK or FailedPrecondition", i, err)
		}
	}
	if created != max {
		t.Errorf("%d concurrent creates: %d succeeded, want %d", tries, created, max)
	}
	if n := e.count(t, `SELECT count(*) FROM webhook_endpoints WHERE owner = $1`, testKeyID); n != max {
		t.Errorf("the key holds %d endpoints, want %d", n, max)
	}

	_, err := create(ctx, tries)
	wantGRPCDetails(t, "gRPC", err, nil, codes.FailedPrecondition, reason.WebhookEndpointLimit)
	r := e.do(t, http.MethodPost, "/v1/webhookEndpoints", `{"url":"http://127.0.0.1:1/one-more","eventTypes":["account.created"]}`)
	wantRESTError(t, r, http.StatusBadRequest, codes.FailedPrecondition, "")
	wantRESTDetails(t, "REST", r, http.StatusBadRequest, reason.WebhookEndpointLimit)

	// Another key has room of its own.
	other := metadata.AppendToOutgoingContext(ctx, "x-api-key", otherKey)
	for i := range max {
		if _, err := create(other, i); err != nil {
			t.Fatalf("another key's create %d: %v", i, err)
		}
	}

	// A delete makes room for one.
	list, err := c.ListWebhookEndpoints(ctx, &shebav1.ListWebhookEndpointsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteWebhookEndpoint(ctx, &shebav1.DeleteWebhookEndpointRequest{EndpointId: list.GetWebhookEndpoints()[0].GetId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := create(ctx, tries+1); err != nil {
		t.Errorf("create after a delete: %v", err)
	}
	_, err = create(ctx, tries+2)
	wantGRPCDetails(t, "gRPC, full again", err, nil, codes.FailedPrecondition, reason.WebhookEndpointLimit)
}
