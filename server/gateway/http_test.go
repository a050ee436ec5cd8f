package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/gen/openapiv2"
	"github.com/shebasvc/sheba/gen/openapiv3"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/server/gateway"
)

func TestRoutingErrors(t *testing.T) {
	t.Parallel()
	g := newTestGateway(t)
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
		{"DELETE on subscription", http.MethodDelete, "/v1/accounts/" + unknownID + "/subscription", 405, codes.Unimplemented, "GET, PATCH, POST"},
		{"GET on login", http.MethodGet, "/v1/accounts:login", 405, codes.Unimplemented, "POST"},
		{"GET on cancel", http.MethodGet, "/v1/accounts/" + unknownID + "/subscription:cancel", 405, codes.Unimplemented, "POST"},
		// The routes of the endpoint itself take the id segment of these
		// paths, verb and all, as an id; they are the verb's paths.
		{"GET on rotateSecret", http.MethodGet, "/v1/webhookEndpoints/" + unknownID + ":rotateSecret", 405, codes.Unimplemented, "POST"},
		{"DELETE on rotateSecret", http.MethodDelete, "/v1/webhookEndpoints/" + unknownID + ":rotateSecret", 405, codes.Unimplemented, "POST"},
		{"PUT on rotateSecret", http.MethodPut, "/v1/webhookEndpoints/" + unknownID + ":rotateSecret", 405, codes.Unimplemented, "POST"},
		{"unknown verb", http.MethodPost, "/v1/webhookEndpoints/" + unknownID + ":rotate", 405, codes.Unimplemented, "DELETE, GET"},
	} {
		t.Run(test.name, func(t *testing.T) {
			r := g.do(t, test.method, test.path, "")
			wantError(t, r, test.httpCode, test.code)
			if got := r.Header.Get("Allow"); got != test.allow {
				t.Errorf("Allow: got %q, want %q", got, test.allow)
			}
		})
	}
}

func TestUnsupportedContentType(t *testing.T) {
	t.Parallel()
	g := newTestGateway(t)
	for _, ct := range []string{"application/x-www-form-urlencoded", "text/plain", "application/xml", "not a type"} {
		t.Run(ct, func(t *testing.T) {
			r := g.do(t, http.MethodPost, "/v1/accounts", `{"username":"ivan","password":"password1"}`, "Content-Type", ct)
			wantError(t, r, http.StatusUnsupportedMediaType, codes.InvalidArgument)
		})
	}
	// Parameters of a supported type are fine.
	r := g.do(t, http.MethodPost, "/v1/accounts", `{"username":"ivan","password":"password1"}`, "Content-Type", "application/json; charset=utf-8")
	wantCode(t, r, http.StatusOK)
}

// TestRESTBadBodies: a JSON body that does not decode to the request
// message is 400, and nothing is created.
func TestRESTBadBodies(t *testing.T) {
	t.Parallel()
	g := newTestGateway(t)
	for _, test := range []struct {
		name string
		body string
	}{
		{"unknown field", `{"username":"alice","password":"password1","admin":true}`},
		{"malformed JSON", `{"username":"alice",`},
		{"wrong type", `{"username":42,"password":"password1"}`},
		{"not an object", `[1,2]`},
	} {
		t.Run(test.name, func(t *testing.T) {
			r := g.do(t, http.MethodPost, "/v1/accounts", test.body)
			wantError(t, r, http.StatusBadRequest, codes.InvalidArgument)
		})
	}
	n := g.count(t, `SELECT count(*) FROM accounts`)
	if n != 0 {
		t.Errorf("got %d accounts after bad bodies, want 0", n)
	}
}

// TestBodyLimit sends a body over MaxBodyBytes, with its length declared
// and without: 413 either way, and nothing is created. The calls bring a
// key: MaxBodyBytes bounds the keyed bodies (TestPublicBodyBound, the
// others).
func TestBodyLimit(t *testing.T) {
	t.Parallel()
	g := newTestGateway(t, withKey(t), func(o *gateway.Options) { o.MaxBodyBytes = 1024 })
	big := `{"username":"judy","password":"` + strings.Repeat("p", 2000) + `"}`

	r := g.do(t, http.MethodPost, "/v1/accounts", big, "X-Api-Key", testKey)
	wantError(t, r, http.StatusRequestEntityTooLarge, codes.ResourceExhausted)

	// Without a Content-Length the limit is found while reading.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, g.url+"/v1/accounts", io.MultiReader(strings.NewReader(big)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", testKey)
	req.ContentLength = -1
	wantError(t, g.send(t, req), http.StatusRequestEntityTooLarge, codes.ResourceExhausted)

	n := g.count(t, `SELECT count(*) FROM accounts`)
	if n != 0 {
		t.Errorf("got %d accounts after oversized bodies, want 0", n)
	}
}

// TestInternalErrorSaysNothingMore breaks the schema under the services:
// the client sees "internal error" and none of the database's words.
func TestInternalErrorSaysNothingMore(t *testing.T) {
	t.Parallel()
	g := newTestGateway(t)
	if _, err := g.pool.Exec(t.Context(), `ALTER TABLE accounts RENAME TO accounts_gone`); err != nil {
		t.Fatal(err)
	}
	_, err := g.account.GetAccount(t.Context(), &shebav1.GetAccountRequest{AccountId: unknownID})
	if code := status.Code(err); code != codes.Internal {
		t.Errorf("GetAccount over the Channel: got %v, want code Internal", err)
	}
	r := g.do(t, http.MethodGet, "/v1/accounts/"+unknownID, "")
	st := wantError(t, r, http.StatusInternalServerError, codes.Internal)
	if st.GetMessage() != "internal error" || len(st.GetDetails()) != 1 || reason.Of(status.FromProto(st)) != reason.Internal {
		t.Errorf("got %s, want only \"internal error\" and the ErrorInfo INTERNAL", r.Body)
	}
	if strings.Contains(string(r.Body), "accounts") || strings.Contains(string(r.Body), "SQLSTATE") {
		t.Errorf("body %s leaks database detail", r.Body)
	}
	// The detail is in the log, for the operator.
	if !strings.Contains(g.logs.String(), "42P01") {
		t.Errorf("log does not carry the database error: %s", g.logs.String())
	}
}

// TestOperatorEndpoints checks the endpoints beside the API: /livez and
// the OpenAPI documents (/openapi.json, /openapi.v3.json, served without a
// key) are the gateway's own, /readyz and /metrics the Operator
// handlers it was given.
func TestOperatorEndpoints(t *testing.T) {
	t.Parallel()
	g := newTestGateway(t)

	r := g.do(t, http.MethodGet, "/livez", "")
	if r.Code != http.StatusNoContent || len(r.Body) != 0 {
		t.Errorf("GET /livez: got %d %q, want 204 and no body", r.Code, r.Body)
	}

	r = g.do(t, http.MethodGet, "/readyz", "")
	wantCode(t, r, http.StatusOK)
	if diff := cmp.Diff(map[string]any{"status": "ok"}, jsonValue(t, r.Body)); diff != "" {
		t.Errorf("GET /readyz body (-want +got):\n%s", diff)
	}

	r = g.do(t, http.MethodGet, "/metrics", "")
	wantCode(t, r, http.StatusOK)
	if string(r.Body) != "# metrics\n" {
		t.Errorf("GET /metrics: got %q, want the Operator's Metrics answer", r.Body)
	}

	for path, doc := range map[string]string{"/openapi.json": openapiv2.Document, "/openapi.v3.json": openapiv3.Document} {
		r = g.do(t, http.MethodGet, path, "", "X-Api-Key", "")
		wantCode(t, r, http.StatusOK)
		if string(r.Body) != doc {
			t.Errorf("GET %s does not serve the generated document", path)
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("GET %s: Content-Type %q, want application/json", path, ct)
		}
	}
}

// operation is one operation of the OpenAPI document.
type operation struct {
	method, path string
	id           string // operationId: Service_Method
}

// operations returns every operation of the served OpenAPI document,
// ordered by method, then path.
func operations(t testing.TB) []operation {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
		} `json:"paths"`
	}
	if err := json.Unmarshal([]byte(openapiv2.Document), &doc); err != nil {
		t.Fatalf("document is not JSON: %v", err)
	}
	var ops []operation
	for path, byMethod := range doc.Paths {
		for method, op := range byMethod {
			ops = append(ops, operation{strings.ToUpper(method), path, op.OperationID})
		}
	}
	slices.SortFunc(ops, func(a, b operation) int {
		if c := strings.Compare(a.method, b.method); c != 0 {
			return c
		}
		return strings.Compare(a.path, b.path)
	})
	return ops
}
