package gateway

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/shebasvc/sheba/gen/docs"
)

// TestHandlerServesAsItsMux checks that Handler, which gives the API's
// paths to rest without asking its mux, answers every request as the mux
// alone does: which handler serves it, with what pattern, or the mux's own
// redirect or error.
func TestHandlerServesAsItsMux(t *testing.T) {
	// Each handler answers with its name and the request's pattern.
	named := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Served-By", name)
			w.Header().Set("X-Pattern", r.Pattern)
			w.WriteHeader(http.StatusTeapot)
		})
	}
	rest := named("rest")
	op := Operator{Ready: named("ready"), Metrics: named("metrics")}
	for _, tc := range []struct{ method, target string }{
		{http.MethodGet, "/v1/ping"},
		{http.MethodPost, "/v1/accounts"},
		{http.MethodGet, "/v1/accounts/a1"},
		{http.MethodPost, "/v1/webhookEndpoints/e1:rotateSecret"},
		{http.MethodGet, "/v1/ping/"},
		{http.MethodGet, "/v1/ping?x=1"},
		{http.MethodGet, "/v1/accounts/a%2Fb"},
		{http.MethodGet, "/v1/accounts/a%20b"},
		{http.MethodGet, "/v1//ping"},
		{http.MethodGet, "/v1/./ping"},
		{http.MethodGet, "/v1/../livez"},
		{http.MethodGet, "/v1/accounts/.."},
		{http.MethodGet, "/v1//"},
		{http.MethodGet, "/v1/"},
		{http.MethodGet, "/v1"},
		{http.MethodGet, "/v2/ping"},
		{http.MethodConnect, "/v1/ping"},
		{http.MethodGet, "/livez"},
		{http.MethodGet, "/readyz"},
		{http.MethodGet, "/metrics"},
		{http.MethodPost, "/metrics"},
		{http.MethodGet, "/openapi.json"},
		{http.MethodGet, "/openapi.v3.json"},
		{http.MethodGet, "/docs"},
		{http.MethodPost, "/docs"},
		{http.MethodGet, "/docs/elements-" + docs.ElementsVersion + "/styles.min.css"},
		{http.MethodGet, "/"},
	} {
		serve := func(h http.Handler) *httptest.ResponseRecorder {
			r := httptest.NewRequest(tc.method, "http://sheba.test"+tc.target, nil)
			if tc.method == http.MethodConnect {
				r.URL.Path = tc.target
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w
		}
		got, want := serve(Handler(rest, op)), serve(handlerMux(rest, op))
		for _, h := range []string{"X-Served-By", "X-Pattern", "Location"} {
			if got.Header().Get(h) != want.Header().Get(h) {
				t.Errorf("%s %s: %s %q, the mux's %q", tc.method, tc.target, h, got.Header().Get(h), want.Header().Get(h))
			}
		}
		if got.Code != want.Code {
			t.Errorf("%s %s: status %d, the mux's %d", tc.method, tc.target, got.Code, want.Code)
		}
	}
}
