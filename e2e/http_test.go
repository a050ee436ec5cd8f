package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/gen/openapiv2"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
)

func TestRoutingErrors(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	for _, test := range []struct {
		name, method, path string
		httpCode           int
		code               codes.Code
		allow              string
	}{
		{"unknown path", http.MethodGet, "/v1/nothing", 404, codes.NotFound, ""},
		{"unknown root path", http.MethodGet, "/favicon.ico", 404, codes.NotFound, ""},
		{"DELETE on accounts", http.MethodDelete, "/v1/accounts", 405, codes.Unimplemented, "POST"},
		{"PUT on ping", http.MethodPut, "/v1/ping", 405, codes.Unimplemented, "GET"},
		{"DELETE on subscription", http.MethodDelete, "/v1/accounts/" + unknownID + "/subscription", 405, codes.Unimplemented, "GET, POST"},
		{"GET on login", http.MethodGet, "/v1/accounts:login", 405, codes.Unimplemented, "POST"},
	} {
		t.Run(test.name, func(t *testing.T) {
			r := e.do(t, test.method, test.path, "")
			wantRESTError(t, r, test.httpCode, test.code, "")
			if got := r.header.Get("Allow"); got != test.allow {
				t.Errorf("Allow: got %q, want %q", got, test.allow)
			}
		})
	}
}

func TestUnsupportedContentType(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	for _, ct := range []string{"application/x-www-form-urlencoded", "text/plain", "application/xml", "not a type"} {
		t.Run(ct, func(t *testing.T) {
			r := e.do(t, http.MethodPost, "/v1/accounts", `{"username":"ivan","password":"password1"}`, "Content-Type", ct)
			wantRESTError(t, r, http.StatusUnsupportedMediaType, codes.InvalidArgument, "")
		})
	}
	// Parameters of a supported type are fine.
	r := e.do(t, http.MethodPost, "/v1/accounts", `{"username":"ivan","password":"password1"}`, "Content-Type", "application/json; charset=utf-8")
	wantCode(t, r, http.StatusOK)
}

func TestBodyLimit(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, func(c *config.Config) { c.HTTP.MaxBodyBytes = 1024 })
	big := `{"username":"judy","password":"` + strings.Repeat("p", 2000) + `"}`

	r := e.do(t, http.MethodPost, "/v1/accounts", big)
	wantRESTError(t, r, http.StatusRequestEntityTooLarge, codes.ResourceExhausted, "")

	// Without a Content-Length the limit is found while reading.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.baseURL+"/v1/accounts", io.MultiReader(strings.NewReader(big)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = -1
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("chunked POST: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	wantRESTError(t, restResponse{code: resp.StatusCode, header: resp.Header, body: body}, http.StatusRequestEntityTooLarge, codes.ResourceExhausted, "")

	// gRPC messages over the same size are RESOURCE_EXHAUSTED.
	_, err = e.account.CreateAccount(t.Context(), &shebav1.CreateAccountRequest{Username: "judy", Password: strings.Repeat("p", 2000)})
	wantGRPCError(t, err, codes.ResourceExhausted, "")

	n := e.count(t, `SELECT count(*) FROM accounts`)
	if n != 0 {
		t.Errorf("got %d accounts after oversized bodies, want 0", n)
	}
}

// TestInternalErrorSaysNothingMore breaks the schema under the server: the
// client sees "internal error" and none of the database's words.
func TestInternalErrorSaysNothingMore(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	if _, err := e.pool.Exec(t.Context(), `ALTER TABLE accounts RENAME TO accounts_gone`); err != nil {
		t.Fatal(err)
	}
	_, err := e.account.GetAccount(t.Context(), &shebav1.GetAccountRequest{AccountId: unknownID})
	wantGRPCError(t, err, codes.Internal, "")
	r := e.do(t, http.MethodGet, "/v1/accounts/"+unknownID, "")
	st := wantRESTError(t, r, http.StatusInternalServerError, codes.Internal, "")
	if st.GetMessage() != "internal error" || len(st.GetDetails()) != 1 || reason.Of(status.FromProto(st)) != reason.Internal {
		t.Errorf("got %s, want only \"internal error\" and the ErrorInfo INTERNAL", r.body)
	}
	if strings.Contains(string(r.body), "accounts") || strings.Contains(string(r.body), "SQLSTATE") {
		t.Errorf("body %s leaks database detail", r.body)
	}
	// The detail is in the log, for the operator.
	if !strings.Contains(e.logs.String(), "42P01") {
		t.Errorf("log does not carry the database error: %s", e.logs.String())
	}
}

func TestOperatorEndpoints(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)

	r := e.do(t, http.MethodGet, "/livez", "")
	if r.code != http.StatusNoContent || len(r.body) != 0 {
		t.Errorf("GET /livez: got %d %q, want 204 and no body", r.code, r.body)
	}

	// Ready once the first database ping has answered.
	deadline := time.Now().Add(10 * time.Second)
	for {
		r = e.do(t, http.MethodGet, "/readyz", "")
		if r.code == http.StatusOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	wantCode(t, r, http.StatusOK)
	if diff := cmp.Diff(map[string]any{"status": "ok"}, r.json(t)); diff != "" {
		t.Errorf("GET /readyz body (-want +got):\n%s", diff)
	}
	for _, svc := range []string{"", "sheba.v1.PingService", "sheba.v1.AccountService", "sheba.v1.SubscriptionService"} {
		resp, err := e.health.Check(t.Context(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("health Check(%q): %v", svc, err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health Check(%q): got %v, want SERVING", svc, resp.GetStatus())
		}
	}

	r = e.do(t, http.MethodGet, "/openapi.json", "")
	wantCode(t, r, http.StatusOK)
	if string(r.body) != openapiv2.Document {
		t.Errorf("GET /openapi.json does not serve the generated document")
	}
}

// TestOpenAPIDocumentHasEveryRoute checks the generated document against
// the REST routes of docs/api.md.
func TestOpenAPIDocumentHasEveryRoute(t *testing.T) {
	var doc struct {
		Swagger string                                `json:"swagger"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal([]byte(openapiv2.Document), &doc); err != nil {
		t.Fatalf("document is not JSON: %v", err)
	}
	var got []string
	for path, ops := range doc.Paths {
		for method := range ops {
			got = append(got, strings.ToUpper(method)+" "+path)
		}
	}
	slices.Sort(got)
	want := []string{
		"GET /v1/accounts/{accountId}",
		"GET /v1/accounts/{accountId}/subscription",
		"GET /v1/ping",
		"GET /v1/subscriptions",
		"GET /v1/webhookEndpoints",
		"GET /v1/webhookEndpoints/{endpointId}",
		"GET /v1/webhookEndpoints/{endpointId}/deliveries",
		"DELETE /v1/webhookEndpoints/{endpointId}",
		"POST /v1/accounts",
		"POST /v1/accounts/{accountId}/subscription",
		"POST /v1/accounts/{accountId}/subscription:cancel",
		"POST /v1/accounts:login",
		"POST /v1/webhookEndpoints",
	}
	slices.Sort(want)
	if doc.Swagger != "2.0" {
		t.Errorf("swagger: got %q, want 2.0", doc.Swagger)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("routes (-want +got):\n%s", diff)
	}
}
