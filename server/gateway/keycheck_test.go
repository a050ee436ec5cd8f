package gateway_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
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

// withPublicLogin makes Ping and Login public and every other method need
// testKey.
func withPublicLogin(t testing.TB) func(*gateway.Options) {
	return withKey(t, "/sheba.v1.PingService/Ping", "/sheba.v1.AccountService/Login")
}

// TestPublicBodiesTakeNoSlot stalls more bodies of a public method's calls
// without a key than there are body slots: a keyed call still gets a slot
// and its answer (it used to wait a second for one and get 429), and the
// stalled calls end, 400, once their bodies are cut.
func TestPublicBodiesTakeNoSlot(t *testing.T) {
	t.Parallel()
	const slots = 2
	g := newTestGateway(t, withPublicLogin(t), func(o *gateway.Options) { o.MaxConcurrentBodies = slots })
	var stalled []*io.PipeWriter
	codes := make(chan int, slots+2)
	for range slots + 2 {
		never, w := io.Pipe()
		stalled = append(stalled, w)
		go func() {
			req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/accounts:login", io.MultiReader(strings.NewReader(`{`), never))
			req.Header.Set("Content-Type", "application/json")
			req.ContentLength = 100
			rec := httptest.NewRecorder()
			g.handler.ServeHTTP(rec, req)
			codes <- rec.Code
		}()
	}
	// Time for them to reach their bodies: were they given slots, they
	// would hold every one now.
	time.Sleep(100 * time.Millisecond)
	for i := range 3 {
		r := g.do(t, http.MethodPost, "/v1/accounts", `{"username":"keyed-`+strconv.Itoa(i)+`","password":"password1"}`, "X-Api-Key", testKey)
		if r.Code != http.StatusOK {
			t.Errorf("keyed create %d with %d public bodies stalled: got HTTP %d (%s), want 200", i, slots+2, r.Code, r.Body)
		}
	}
	for _, w := range stalled {
		w.CloseWithError(io.ErrUnexpectedEOF)
	}
	for range slots + 2 {
		if code := <-codes; code != http.StatusBadRequest {
			t.Errorf("a stalled public body, cut: got HTTP %d, want 400", code)
		}
	}
}

// TestPublicBodyBound: the body of a public method's call without a key is
// read within its own bound, 4 KiB, as declared (nothing read), as sent
// and once decompressed: 413 beyond; the same bodies with a key are read
// within MaxBodyBytes, and decoded.
func TestPublicBodyBound(t *testing.T) {
	t.Parallel()
	g := newTestGateway(t, withPublicLogin(t))
	const bound = 4 << 10
	padded := func(n int) string {
		return `{"username":"alice","password":"password1"` + strings.Repeat(" ", n-43) + `}`
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := io.WriteString(zw, padded(bound+1)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	for _, test := range []struct {
		name          string
		body          string
		header        []string
		contentLength int64 // -1: none declared
		keyless       int   // the answer without a key
		wantRead      bool  // without a key, the body is read
	}{
		// Alice does not exist: a login decoded is refused 401.
		{"within", padded(bound), nil, 0, 401, true},
		{"over", padded(bound + 1), nil, 0, 413, false},
		{"over, no length", padded(bound + 1), nil, -1, 413, true},
		{"over once decompressed", gz.String(), []string{"Content-Encoding", "gzip"}, 0, 413, true},
	} {
		t.Run(test.name, func(t *testing.T) {
			for _, key := range []string{"", testKey} {
				req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/accounts:login", strings.NewReader(test.body))
				req.Header.Set("Content-Type", "application/json")
				for i := 0; i+1 < len(test.header); i += 2 {
					req.Header.Set(test.header[i], test.header[i+1])
				}
				want := test.keyless
				if key != "" {
					req.Header.Set("X-Api-Key", key)
					want = http.StatusUnauthorized
				}
				if test.contentLength != 0 {
					req.ContentLength = test.contentLength
				}
				rec, read := g.serveCounting(req)
				if rec.Code != want {
					t.Errorf("key %q: got HTTP %d, want %d; body %.300q", key, rec.Code, want, rec.Body)
				}
				if rec.Code == http.StatusRequestEntityTooLarge {
					st := answerStatus(t, rec)
					if reason.Of(st) != reason.BodyTooLarge || !strings.Contains(st.Message(), strconv.Itoa(bound)) {
						t.Errorf("got %s %q, want %s naming %d bytes", reason.Of(st), st.Message(), reason.BodyTooLarge, bound)
					}
				}
				if key == "" && (read > 0) != test.wantRead {
					t.Errorf("without a key, %d bytes read, want read %v", read, test.wantRead)
				}
			}
		})
	}
}
