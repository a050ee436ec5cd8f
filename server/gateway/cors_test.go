package gateway

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/apikey"
)

// TestCORSEveryRoute: a browser page of an allowed origin may call every
// method of the method table, by its REST route's verb and by the browser
// protocols' POST: the preflight of each is granted that method.
func TestCORSEveryRoute(t *testing.T) {
	const origin = "http://app.example.test"
	h, err := New(t.Context(), newRecordingConn().Channel, Options{MaxBodyBytes: 1 << 20, MaxConcurrentBodies: 1,
		Authenticator: apikey.New(nil, nil), AllowedOrigins: []string{origin}})
	if err != nil {
		t.Fatal(err)
	}
	preflight := func(method, path string) {
		t.Helper()
		r := httptest.NewRequestWithContext(t.Context(), http.MethodOptions, path, http.NoBody)
		r.Header.Set("Origin", origin)
		r.Header.Set("Access-Control-Request-Method", method)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusNoContent || rec.Header().Get("Access-Control-Allow-Origin") != origin ||
			rec.Header().Get("Access-Control-Allow-Methods") != method {
			t.Errorf("preflight of %s %s: got %d, Allow-Origin %q, Allow-Methods %q; want 204 granting %s",
				method, path, rec.Code, rec.Header().Get("Access-Control-Allow-Origin"), rec.Header().Get("Access-Control-Allow-Methods"), method)
		}
	}
	variable := regexp.MustCompile(`\{[^}]*\}`)
	for _, svc := range shebav1.Services {
		for _, m := range svc.Methods {
			preflight(m.HTTP.Method, variable.ReplaceAllString(m.HTTP.Path, "some-id"))
			preflight(http.MethodPost, m.FullName)
		}
	}
}
