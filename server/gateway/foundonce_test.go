package gateway_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"google.golang.org/grpc"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/apikey"
	"github.com/shebasvc/sheba/server/gateway"
)

// countingAuthn is the gateway's Authenticator, counting its key checks.
type countingAuthn struct {
	*apikey.Authenticator
	checks, knowns atomic.Int64
}

func (a *countingAuthn) Check(apiKey, authorization string) apikey.Verdict {
	a.checks.Add(1)
	return a.Authenticator.Check(apiKey, authorization)
}

func (a *countingAuthn) Known(apiKey, authorization string) bool {
	a.knowns.Add(1)
	return a.Authenticator.Known(apiKey, authorization)
}

type pingServer struct {
	shebav1.UnimplementedPingServiceServer
}

func (pingServer) Ping(context.Context, *shebav1.PingRequest) (*shebav1.PingResponse, error) {
	return &shebav1.PingResponse{Message: "pong"}, nil
}

// keyOnceGateway is a gateway whose Authenticator knows testKey and makes
// Ping need it, in front of a chain whose own Authenticator knows no key:
// a keyed call answers 200 only if the chain took the gateway's verdict,
// and the gateway's checks are counted.
func keyOnceGateway(t *testing.T) (http.Handler, *countingAuthn) {
	t.Helper()
	sum := sha256.Sum256([]byte(testKey))
	key, err := apikey.ParseKey("test", hex.EncodeToString(sum[:]))
	if err != nil {
		t.Fatal(err)
	}
	authn := &countingAuthn{Authenticator: apikey.New([]apikey.Key{key}, nil)}
	rest, err := gateway.New(t.Context(), keylessPingChannel(), gateway.Options{MaxBodyBytes: 1 << 20, MaxConcurrentBodies: 4, Authenticator: authn})
	if err != nil {
		t.Fatal(err)
	}
	return rest, authn
}

// keylessPingChannel is a Channel serving Ping behind a chain whose
// Authenticator knows no key and no public method: it refuses every call
// whose caller it must find itself.
func keylessPingChannel() *gateway.Channel {
	chain := auth.UnaryServerInterceptor(apikey.New(nil, nil).Authenticate)
	channel := gateway.NewChannel(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return chain(ctx, req, info, handler)
	})
	channel.RegisterService(&shebav1.PingService_ServiceDesc, pingServer{})
	return channel
}

// TestRESTKeyCheckedOnce: a REST call's key is checked once, by the
// gateway, and the chain takes the caller it found rather than read and
// hash the key again.
func TestRESTKeyCheckedOnce(t *testing.T) {
	h, authn := keyOnceGateway(t)
	for _, header := range []string{"X-Api-Key", "Authorization"} {
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/v1/ping", nil)
		value := testKey
		if header == "Authorization" {
			value = "Bearer " + testKey
		}
		req.Header.Set(header, value)
		before := authn.checks.Load()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "pong") {
			t.Fatalf("%s: got HTTP %d %s, want 200 pong (the chain, which knows no key, took the gateway's verdict)", header, rec.Code, rec.Body)
		}
		if n := authn.checks.Load() - before; n != 1 {
			t.Errorf("%s: the gateway checked the key %d times, want 1", header, n)
		}
	}
	if n := authn.knowns.Load(); n != 0 {
		t.Errorf("Known called %d times, want 0 (Check gives the verdict)", n)
	}
}

// TestRESTVerdictNotForged: what a client sends cannot stand for the
// gateway's verdict: a call whose key the gateway does not know is judged
// by the chain, which refuses it, whatever else the request carries.
func TestRESTVerdictNotForged(t *testing.T) {
	h, _ := keyOnceGateway(t)
	for _, header := range [][2]string{
		{"X-Api-Key", "guessed"},
		{"Grpc-Metadata-X-Api-Key", "guessed"},
		{"Authorization", "Basic " + testKey},
		{"X-Api-Key", testKey + "\x7f"},
	} {
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/v1/ping", nil)
		req.Header.Set(header[0], header[1])
		for _, name := range []string{"Grpc-Metadata-Sheba-Caller", "X-Caller-Id", "Grpc-Metadata-Caller-Id"} {
			req.Header.Set(name, "test")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized {
			t.Errorf("%s: %q: got HTTP %d %s, want 401", header[0], header[1], rec.Code, rec.Body)
		}
	}
}

// TestChannelCallsOutsideRESTAuthenticate: a call over the Channel that
// did not come through the gateway's REST handler carries no verdict: the
// chain reads and checks its key itself.
func TestChannelCallsOutsideRESTAuthenticate(t *testing.T) {
	_, err := shebav1.NewPingServiceClient(keylessPingChannel()).Ping(t.Context(), &shebav1.PingRequest{})
	if err == nil {
		t.Fatal("a call without a key through a chain that knows none succeeded")
	}
}

// TestDirectRoutesAsTheMux: a path the route table would find but the mux
// splits otherwise (a trailing or doubled slash) is the mux's to answer, as
// it was: 404; a route's path under another method is 405.
func TestDirectRoutesAsTheMux(t *testing.T) {
	h, _ := keyOnceGateway(t)
	for _, test := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/v1/ping", http.StatusOK},
		{http.MethodGet, "/v1/ping/", http.StatusNotFound},
		{http.MethodGet, "//v1/ping", http.StatusNotFound},
		{http.MethodGet, "/v1//ping", http.StatusNotFound},
		{http.MethodPost, "/v1/ping", http.StatusMethodNotAllowed},
	} {
		req := httptest.NewRequestWithContext(t.Context(), test.method, test.path, nil)
		req.Header.Set("X-Api-Key", testKey)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != test.want {
			t.Errorf("%s %s: got HTTP %d %s, want %d", test.method, test.path, rec.Code, rec.Body, test.want)
		}
	}
}
