package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/codec/cborpb"
	"github.com/shebasvc/sheba/interceptors/apikey"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/server/gateway"
)

// countingBody is a request body that counts the bytes read from it.
type countingBody struct {
	r    io.Reader
	read atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read.Add(int64(n))
	return n, err
}

func (b *countingBody) Close() error { return nil }

// serveCounting serves req in process with its body counted, and returns
// the answer and the bytes of the body that were read.
func (g *testGateway) serveCounting(req *http.Request) (*httptest.ResponseRecorder, int64) {
	body := &countingBody{r: req.Body}
	req.Body = body
	rec := httptest.NewRecorder()
	g.handler.ServeHTTP(rec, req)
	return rec, body.read.Load()
}

// TestKeyBeforeBody: a request to a method that needs a key, without a
// valid one, is 401 with the chain's reason whatever its body (its bytes,
// type, encoding or declared length), and not a byte of the body is read;
// with the key, the same body is read and answered for what it is; routing
// errors and public methods are as they were.
func TestKeyBeforeBody(t *testing.T) {
	t.Parallel()
	g := newTestGateway(t, withKey(t), func(o *gateway.Options) { o.MaxBodyBytes = 1024 })
	const garbage = `{"username":`
	cborBody, err := cbor.Marshal(map[string]any{"unknown": 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, test := range []struct {
		name, method, path, body string
		header                   []string // name, value pairs
		contentLength            int64    // declared, when not 0
		httpCode                 int
		reason                   string // of the ErrorInfo
		wantRead                 bool   // the body is read
	}{
		{"no key", "POST", "/v1/accounts", garbage, nil, 0, 401, reason.APIKeyMissing, false},
		{"unknown key", "POST", "/v1/accounts", garbage, []string{"X-Api-Key", "nope"}, 0, 401, reason.APIKeyInvalid, false},
		{"not bearer", "POST", "/v1/accounts", garbage, []string{"Authorization", "Basic " + testKey}, 0, 401, reason.APIKeyInvalid, false},
		{"key that metadata cannot carry", "POST", "/v1/accounts", garbage, []string{"X-Api-Key", testKey + "\x7f"}, 0, 401, reason.APIKeyMissing, false},
		{"no key, unknown type", "POST", "/v1/accounts", garbage, []string{"Content-Type", "text/plain"}, 0, 401, reason.APIKeyMissing, false},
		{"no key, unknown encoding", "POST", "/v1/accounts", garbage, []string{"Content-Encoding", "br"}, 0, 401, reason.APIKeyMissing, false},
		{"no key, corrupt gzip", "POST", "/v1/accounts", garbage, []string{"Content-Encoding", "gzip"}, 0, 401, reason.APIKeyMissing, false},
		{"no key, declared over the limit", "POST", "/v1/accounts", garbage, nil, 1 << 20, 401, reason.APIKeyMissing, false},
		{"no key, CBOR", "POST", "/v1/accounts", string(cborBody), []string{"Content-Type", cborpb.MediaType}, 0, 401, reason.APIKeyMissing, false},
		{"no key, login", "POST", "/v1/accounts:login", garbage, nil, 0, 401, reason.APIKeyMissing, false},
		{"no key, subscription", "POST", "/v1/accounts/" + unknownID + "/subscription", garbage, nil, 0, 401, reason.APIKeyMissing, false},
		{"no key, unknown path", "POST", "/v1/nothing", garbage, nil, 0, 404, reason.RouteNotFound, false},
		{"no key, wrong method", "PUT", "/v1/accounts", garbage, nil, 0, 405, reason.MethodNotAllowed, false},
		{"key, malformed", "POST", "/v1/accounts", garbage, []string{"X-Api-Key", testKey}, 0, 400, reason.MalformedBody, true},
		{"bearer key, malformed", "POST", "/v1/accounts", garbage, []string{"Authorization", "Bearer " + testKey}, 0, 400, reason.MalformedBody, true},
		{"key in Grpc-Metadata form, malformed", "POST", "/v1/accounts", garbage, []string{"Grpc-Metadata-X-Api-Key", testKey}, 0, 400, reason.MalformedBody, true},
		{"key, unknown type", "POST", "/v1/accounts", garbage, []string{"X-Api-Key", testKey, "Content-Type", "text/plain"}, 0, 415, reason.UnsupportedMediaType, false},
		{"key, declared over the limit", "POST", "/v1/accounts", garbage, []string{"X-Api-Key", testKey}, 1 << 20, 413, reason.BodyTooLarge, false},
	} {
		t.Run(test.name, func(t *testing.T) {
			req := httptest.NewRequestWithContext(t.Context(), test.method, test.path, strings.NewReader(test.body))
			req.Header.Set("Content-Type", "application/json")
			for i := 0; i+1 < len(test.header); i += 2 {
				req.Header.Set(test.header[i], test.header[i+1])
			}
			if test.contentLength != 0 {
				req.ContentLength = test.contentLength
			}
			rec, read := g.serveCounting(req)
			if rec.Code != test.httpCode {
				t.Fatalf("got HTTP %d, want %d; body %q", rec.Code, test.httpCode, rec.Body)
			}
			st := answerStatus(t, rec)
			if got := reason.Of(st); got != test.reason {
				t.Errorf("reason: got %q, want %q (%s)", got, test.reason, st.Message())
			}
			if gotRead := read > 0; gotRead != test.wantRead {
				t.Errorf("body read: %d bytes, want read %v", read, test.wantRead)
			}
		})
	}
	if n := g.count(t, `SELECT count(*) FROM accounts`); n != 0 {
		t.Errorf("got %d accounts, want 0", n)
	}
}

// TestKeyBeforeBodyPublicMethod: a public method needs no key, so its body
// is read and decoded without one, as before.
func TestKeyBeforeBodyPublicMethod(t *testing.T) {
	t.Parallel()
	g := newTestGateway(t, func(o *gateway.Options) {
		o.Authenticator = apikey.New(nil, []string{"/sheba.v1.AccountService/Login"})
	})
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/accounts:login", strings.NewReader(`{"username":`))
	req.Header.Set("Content-Type", "application/json")
	rec, read := g.serveCounting(req)
	if rec.Code != http.StatusBadRequest || read == 0 {
		t.Errorf("public method without a key, malformed body: got HTTP %d with %d bytes read, want 400 with the body read", rec.Code, read)
	}
}

// TestUnauthenticatedBodiesTakeNoSlot holds the only body slot with a keyed
// body that never ends: requests without a key still answer 401 at once,
// where they used to wait for the slot and get 429 after a second.
func TestUnauthenticatedBodiesTakeNoSlot(t *testing.T) {
	t.Parallel()
	g := newTestGateway(t, withKey(t), func(o *gateway.Options) { o.MaxConcurrentBodies = 1 })
	stall, stallWriter := io.Pipe()
	defer stallWriter.Close()
	holding := make(chan struct{})
	go func() {
		defer close(holding)
		req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/accounts", io.MultiReader(strings.NewReader(`{`), stall))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Api-Key", testKey)
		req.ContentLength = 100
		g.handler.ServeHTTP(httptest.NewRecorder(), req)
	}()
	// Wait until the keyed body holds the slot: a second keyed request
	// then waits a second for it and gets 429.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/accounts", strings.NewReader(`{}`))
		req.Header.Set("X-Api-Key", testKey)
		rec := httptest.NewRecorder()
		g.handler.ServeHTTP(rec, req)
		if rec.Code == http.StatusTooManyRequests {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the keyed body does not hold the slot after 10 s: a keyed request got HTTP %d", rec.Code)
		}
	}
	for range 5 {
		// A body that never ends, like the keyed one.
		never, w := io.Pipe()
		req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/accounts", never)
		req.Header.Set("Content-Type", "application/json")
		req.ContentLength = 100
		rec := httptest.NewRecorder()
		g.handler.ServeHTTP(rec, req)
		w.Close()
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("without a key while the slot is held: got HTTP %d, want 401; body %q", rec.Code, rec.Body)
		}
	}
	stallWriter.CloseWithError(io.ErrUnexpectedEOF)
	<-holding
}

// answerStatus decodes the google.rpc.Status of an error answer, JSON or
// CBOR by its Content-Type.
func answerStatus(t *testing.T, rec *httptest.ResponseRecorder) *status.Status {
	t.Helper()
	var m runtime.Marshaler = &runtime.JSONPb{}
	if rec.Header().Get("Content-Type") == cborpb.MediaType {
		m = &cborpb.Marshaler{}
	}
	var st spb.Status
	if err := m.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatalf("answer %q is not a google.rpc.Status: %v", rec.Body, err)
	}
	return status.FromProto(&st)
}
