package apikey_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/apikey"
	"github.com/shebasvc/sheba/interceptors/callinfo"
	"github.com/shebasvc/sheba/interceptors/interceptortest"
)

func mustKey(t *testing.T, id, key string) apikey.Key {
	t.Helper()
	sum := sha256.Sum256([]byte(key))
	k, err := apikey.ParseKey(id, hex.EncodeToString(sum[:]))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// methodContext is an incoming call context for method with metadata md.
func methodContext(method string, md ...string) context.Context {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(md...))
	return grpc.NewContextWithServerTransportStream(ctx, &fakeStream{method: method})
}

type fakeStream struct {
	grpc.ServerTransportStream
	method string
}

func (s *fakeStream) Method() string { return s.method }

func TestAuthenticate(t *testing.T) {
	const private, public = "/sheba.v1.AccountService/GetAccount", "/sheba.v1.PingService/Ping"
	var rejected int
	a := apikey.New(
		[]apikey.Key{mustKey(t, "billing", "key-one"), mustKey(t, "reports", "key-two")},
		[]string{public},
		apikey.WithOnReject(func(context.Context) { rejected++ }),
	)
	for _, test := range []struct {
		name    string
		ctx     context.Context
		wantID  string
		wantErr bool
	}{
		{"x-api-key", methodContext(private, "x-api-key", "key-one"), "billing", false},
		{"second key", methodContext(private, "x-api-key", "key-two"), "reports", false},
		{"bearer", methodContext(private, "authorization", "Bearer key-two"), "reports", false},
		{"bearer lower case", methodContext(private, "authorization", "bearer key-one"), "billing", false},
		{"missing", methodContext(private), "", true},
		{"wrong key", methodContext(private, "x-api-key", "key-three"), "", true},
		{"hash instead of key", methodContext(private, "x-api-key", hex.EncodeToString(func() []byte { s := sha256.Sum256([]byte("key-one")); return s[:] }())), "", true},
		{"basic scheme", methodContext(private, "authorization", "Basic a2V5LW9uZQ=="), "", true},
		{"bearer without key", methodContext(private, "authorization", "Bearer "), "", true},
		{"public without key", methodContext(public), "", false},
		{"public with wrong key", methodContext(public, "x-api-key", "nope"), "", false},
		{"public with key", methodContext(public, "x-api-key", "key-one"), "billing", false},
	} {
		t.Run(test.name, func(t *testing.T) {
			before := rejected
			ctx, err := a.Authenticate(test.ctx)
			// Within the chain the caller goes in the call's Info.
			ci := &callinfo.Info{RequestID: "req"}
			chainCtx := callinfo.NewContext(test.ctx, ci)
			chainCtx, chainErr := a.Authenticate(chainCtx)
			if status.Code(chainErr) != status.Code(err) {
				t.Errorf("in the chain: got %v, want %v", chainErr, err)
			}
			if test.wantErr {
				if status.Code(err) != codes.Unauthenticated {
					t.Fatalf("got %v, want Unauthenticated", err)
				}
				if rejected != before+2 {
					t.Errorf("onReject called %d times for two calls, want 2", rejected-before)
				}
				return
			}
			if err != nil {
				t.Fatalf("got %v, want success", err)
			}
			if got := apikey.IDFromContext(ctx); got != test.wantID {
				t.Errorf("caller id: got %q, want %q", got, test.wantID)
			}
			if got := apikey.IDFromContext(chainCtx); got != test.wantID || ci.CallerID != test.wantID {
				t.Errorf("caller id in the chain: got %q, Info %q; want %q", got, ci.CallerID, test.wantID)
			}
		})
	}
}

// TestKnown checks that Known, which the REST gateway asks before it reads
// a body, finds a key where Authenticate finds one and nowhere else, and
// counts no rejection.
func TestKnown(t *testing.T) {
	const private, public = "/sheba.v1.AccountService/GetAccount", "/sheba.v1.PingService/Ping"
	var rejected int
	a := apikey.New([]apikey.Key{mustKey(t, "billing", "key-one")}, []string{public},
		apikey.WithOnReject(func(context.Context) { rejected++ }))
	for _, test := range []struct {
		name, apiKey, authorization string
		want                        bool
	}{
		{"x-api-key", "key-one", "", true},
		{"bearer", "", "Bearer key-one", true},
		{"bearer lower case, spaces", "", "bearer  key-one ", true},
		{"x-api-key first", "key-two", "Bearer key-one", false},
		{"empty x-api-key, then bearer", "", "Bearer key-one", true},
		{"missing", "", "", false},
		{"wrong key", "key-two", "", false},
		{"basic scheme", "", "Basic a2V5LW9uZQ==", false},
		{"bearer without key", "", "Bearer ", false},
		{"no scheme", "", "key-one", false},
	} {
		t.Run(test.name, func(t *testing.T) {
			if got := a.Known(test.apiKey, test.authorization); got != test.want {
				t.Errorf("Known(%q, %q): got %v, want %v", test.apiKey, test.authorization, got, test.want)
			}
			var md []string
			if test.apiKey != "" {
				md = append(md, "x-api-key", test.apiKey)
			}
			if test.authorization != "" {
				md = append(md, "authorization", test.authorization)
			}
			_, err := a.Authenticate(methodContext(private, md...))
			if authenticated := err == nil; authenticated != test.want {
				t.Errorf("Authenticate: got %v, but Known says %v", err, test.want)
			}
		})
	}
	before := rejected
	a.Known("nope", "")
	if rejected != before {
		t.Errorf("Known counted %d rejections, want none", rejected-before)
	}
	if !a.Public(public) || a.Public(private) {
		t.Errorf("Public: got %v for %s and %v for %s, want true and false", a.Public(public), public, a.Public(private), private)
	}
}

func TestParseKey(t *testing.T) {
	for _, bad := range []string{"", "abc", "zz" + hex.EncodeToString(make([]byte, 31))} {
		if _, err := apikey.ParseKey("x", bad); err == nil {
			t.Errorf("ParseKey(%q): got nil error", bad)
		}
	}
}

// TestServer runs the authenticator in a real server through
// go-grpc-middleware's auth interceptor.
func TestServer(t *testing.T) {
	a := apikey.New([]apikey.Key{mustKey(t, "billing", "key-one")}, nil)
	var seen string
	client := interceptortest.Serve(t, auth.UnaryServerInterceptor(a.Authenticate), func(ctx context.Context) (*shebav1.PingResponse, error) {
		seen = apikey.IDFromContext(ctx)
		return &shebav1.PingResponse{Message: "pong"}, nil
	})
	_, err := client.Ping(t.Context(), &shebav1.PingRequest{})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("without key: got %v, want Unauthenticated", err)
	}
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer key-one")
	if _, err := client.Ping(ctx, &shebav1.PingRequest{}); err != nil {
		t.Fatalf("with key: %v", err)
	}
	if seen != "billing" {
		t.Errorf("handler saw caller %q, want billing", seen)
	}
}

func BenchmarkAuthenticate(b *testing.B) {
	keys := make([]apikey.Key, 10)
	for i := range keys {
		sum := sha256.Sum256([]byte{byte(i)})
		keys[i], _ = apikey.ParseKey("k", hex.EncodeToString(sum[:]))
	}
	keys[9] = func() apikey.Key {
		sum := sha256.Sum256([]byte("the-key"))
		k, _ := apikey.ParseKey("caller", hex.EncodeToString(sum[:]))
		return k
	}()
	a := apikey.New(keys, nil)
	ctx := methodContext("/sheba.v1.AccountService/GetAccount", "x-api-key", "the-key")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Authenticate(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
