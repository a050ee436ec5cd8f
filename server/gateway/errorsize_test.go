package gateway_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"

	"github.com/shebasvc/sheba/codec/cborpb"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// TestErrorAnswersAreBounded sends request text far over reason.MaxQuoted
// bytes wherever an error quotes the request: the answer stays under 4 KiB
// and quotes at most MaxQuoted bytes of it, in JSON and CBOR. The calls
// bring a key: a body that large, without one, is refused for its size
// (TestPublicBodyBound).
func TestErrorAnswersAreBounded(t *testing.T) {
	t.Parallel()
	g := newTestGateway(t, withKey(t))
	const n = 60 << 10 // under the 64 KiB of headers a server allows
	long := strings.Repeat("a", n)
	bigName, err := cbor.Marshal(map[string]any{long: 1})
	if err != nil {
		t.Fatal(err)
	}
	bigValue, err := cbor.Marshal(map[string]any{"username": 1, "password": long})
	if err != nil {
		t.Fatal(err)
	}
	for _, test := range []struct {
		name, method, path, body string
		header                   []string
		httpCode                 int
	}{
		{"unknown JSON field", "POST", "/v1/accounts", `{"` + strings.Repeat("a", 1_000_000) + `":1}`, nil, 400},
		{"bad JSON value", "POST", "/v1/accounts", `{"username":` + strings.Repeat("1", n) + `}`, nil, 400},
		{"bad JSON token", "POST", "/v1/accounts", `{"username":"x","password":"y",` + long + `}`, nil, 400},
		{"unknown CBOR field", "POST", "/v1/accounts", string(bigName), []string{"Content-Type", cborpb.MediaType}, 400},
		{"bad CBOR value", "POST", "/v1/accounts", string(bigValue), []string{"Content-Type", cborpb.MediaType}, 400},
		{"content type", "POST", "/v1/accounts", `{}`, []string{"Content-Type", "text/" + long}, 415},
		{"content encoding", "POST", "/v1/accounts", `{}`, []string{"Content-Encoding", long}, 415},
		{"path", "DELETE", "/v1/accounts/" + long, "", nil, 405},
		{"query parameter", "GET", "/v1/subscriptions?page_size=" + long, "", nil, 400},
		{"grpc-timeout", "GET", "/v1/ping", "", []string{"Grpc-Timeout", long}, 400},
	} {
		for _, accept := range []string{"application/json", cborpb.MediaType} {
			t.Run(test.name+" "+accept, func(t *testing.T) {
				req := httptest.NewRequestWithContext(t.Context(), test.method, test.path, strings.NewReader(test.body))
				if test.body != "" {
					req.Header.Set("Content-Type", "application/json")
				}
				for i := 0; i+1 < len(test.header); i += 2 {
					req.Header.Set(test.header[i], test.header[i+1])
				}
				req.Header.Set("Accept", accept)
				req.Header.Set("X-Api-Key", testKey)
				rec := httptest.NewRecorder()
				g.handler.ServeHTTP(rec, req)
				if rec.Code != test.httpCode {
					t.Fatalf("got HTTP %d, want %d; body %.300q", rec.Code, test.httpCode, rec.Body)
				}
				if size := rec.Body.Len(); size > 4<<10 {
					t.Errorf("answer of %d bytes, want at most 4 KiB", size)
				}
				for _, filler := range []string{"a", "1"} {
					if run := longestRun(rec.Body.Bytes(), filler[0]); run > reason.MaxQuoted {
						t.Errorf("the answer quotes %d bytes of the request, want at most %d: %.400q", run, reason.MaxQuoted, rec.Body)
					}
				}
			})
		}
	}
}

// longestRun returns the length of the longest run of c in b.
func longestRun(b []byte, c byte) int {
	longest := 0
	n := 0
	for _, x := range b {
		if x == c {
			n++
			longest = max(longest, n)
			continue
		}
		n = 0
	}
	return longest
}
