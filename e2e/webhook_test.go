package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/shebasvc/sheba/config"
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

	// The secret is shown only on create.
	r = e.do(t, http.MethodGet, "/v1/webhookEndpoints/"+id, "")
	wantCode(t, r, http.StatusOK)
	if got := r.JSON(t); got["id"] != id || got["secret"] != "" {
		t.Errorf("get: got %s, want the endpoint with an empty secret", r.Body)
	}

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

func TestWebhookEndpointPrivateTargetsRefused(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t) // allow_private_networks false, the default
	for _, url := range []string{
		"http://127.0.0.1:8080/hook",
		"http://localhost/hook",
		"http://10.0.0.1/hook",
		"http://169.254.169.254/latest/meta-data",
		"http://[::1]/hook",
	} {
		r := e.do(t, http.MethodPost, "/v1/webhookEndpoints", `{"url":"`+url+`","eventTypes":["account.created"]}`)
		wantRESTError(t, r, http.StatusBadRequest, codes.InvalidArgument, "url")
	}
}
