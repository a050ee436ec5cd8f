package apikey_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/testing/protocmp"

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

// twoKeys is an authenticator of the keys key-one (caller billing) and
// key-two (reports), for which public is public, counting its rejections
// in rejected.
func twoKeys(t *testing.T, public string, rejected *int) *apikey.Authenticator {
	t.Helper()
	return apikey.New(
		[]apikey.Key{mustKey(t, "billing", "key-one"), mustKey(t, "reports", "key-two")},
		[]string{public},
		apikey.WithOnReject(func(context.Context) { *rejected++ }),
	)
}

func TestAuthenticate(t *testing.T) {
	const private, public = "/sheba.v1.AccountService/GetAccount", "/sheba.v1.PingService/Ping"
	var rejected int
	a := twoKeys(t, public, &rejected)
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

// TestAuthenticateMetadata: the check of the gRPC server's tap, on the
// metadata before the call starts, answers as Authenticate answers, with
// the same error and one rejection counted, and leaves a public method's
// call unread.
func TestAuthenticateMetadata(t *testing.T) {
	const private, public = "/sheba.v1.AccountService/GetAccount", "/sheba.v1.PingService/Ping"
	var rejected int
	a := twoKeys(t, public, &rejected)
	for _, test := range []struct {
		name   string
		method string
		md     []string
		wantID string // what the tap finds: "" for a public method's call
	}{
		{"x-api-key", private, []string{"x-api-key", "key-one"}, "billing"},
		{"bearer", private, []string{"authorization", "Bearer key-two"}, "reports"},
		{"x-api-key first", private, []string{"x-api-key", "key-two", "authorization", "Bearer key-one"}, "reports"},
		{"missing", private, nil, ""},
		{"wrong key", private, []string{"x-api-key", "key-three"}, ""},
		{"basic scheme", private, []string{"authorization", "Basic a2V5LW9uZQ=="}, ""},
		{"public without key", public, nil, ""},
		{"public with wrong key", public, []string{"x-api-key", "nope"}, ""},
		{"public with key", public, []string{"x-api-key", "key-one"}, ""},
	} {
		t.Run(test.name, func(t *testing.T) {
			_, want := a.Authenticate(methodContext(test.method, test.md...))
			before := rejected
			ctx, err := a.AuthenticateMetadata(t.Context(), test.method, metadata.Pairs(test.md...))
			if status.Code(err) != status.Code(want) || status.Convert(err).Message() != status.Convert(want).Message() {
				t.Fatalf("got %v, want %v as Authenticate answers", err, want)
			}
			if err != nil {
				if rejected != before+1 {
					t.Errorf("onReject called %d times, want once", rejected-before)
				}
				if diff := cmp.Diff(status.Convert(want).Proto(), status.Convert(err).Proto(), protocmp.Transform()); diff != "" {
					t.Errorf("status (-Authenticate's +got):\n%s", diff)
				}
				return
			}
			if got := apikey.IDFromContext(ctx); got != test.wantID {
				t.Errorf("caller id: got %q, want %q", got, test.wantID)
			}
		})
	}
}

// TestAuthenticatedOnce: the chain's Authenticate takes the caller that the
// tap found, without reading the key again (so without hashing it again):
// here the metadata the chain sees holds another key, or none, and the
// caller is still the tap's.
func TestAuthenticatedOnce(t *testing.T) {
	const private = "/sheba.v1.AccountService/GetAccount"
	var rejected int
	a := twoKeys(t, "", &rejected) // no public method: Ping below needs a key
	tapped, err := a.AuthenticateMetadata(t.Context(), private, metadata.Pairs("x-api-key", "key-one"))
	if err != nil {
		t.Fatal(err)
	}
	for _, md := range [][]string{nil, {"x-api-key", "key-two"}, {"x-api-key", "wrong"}} {
		ctx := grpc.NewContextWithServerTransportStream(metadata.NewIncomingContext(tapped, metadata.Pairs(md...)), &fakeStream{method: private})
		ci := &callinfo.Info{}
		if _, err := a.Authenticate(callinfo.NewContext(ctx, ci)); err != nil || ci.CallerID != "billing" {
			t.Errorf("metadata %q after the tap: got %v, caller %q; want the tap's caller, billing", md, err, ci.CallerID)
		}
	}

	// Through a real server: the tap, then an interceptor that hands the
	// chain metadata with a wrong key, then the chain's auth link.
	wrongKey := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return handler(metadata.NewIncomingContext(ctx, metadata.Pairs("x-api-key", "wrong")), req)
	}
	var seen string
	client := interceptortest.ServeWith(t, []grpc.ServerOption{
		grpc.InTapHandle(func(ctx context.Context, info *tap.Info) (context.Context, error) {
			return a.AuthenticateMetadata(ctx, info.FullMethodName, info.Header)
		}),
		grpc.ChainUnaryInterceptor(wrongKey, auth.UnaryServerInterceptor(a.Authenticate)),
	}, func(ctx context.Context) (*shebav1.PingResponse, error) {
		seen = apikey.IDFromContext(ctx)
		return &shebav1.PingResponse{Message: "pong"}, nil
	})
	if _, err := client.Ping(metadata.AppendToOutgoingContext(t.Context(), "x-api-key", "key-two"), &shebav1.PingRequest{}); err != nil {
		t.Fatalf("with a key: %v", err)
	}
	if seen != "reports" {
		t.Errorf("the handler saw caller %q, want reports, whom the tap found", seen)
	}
	_, err = client.Ping(t.Context(), &shebav1.PingRequest{})
	if st := status.Convert(err); st.Code() != codes.Unauthenticated || len(st.Details()) != 1 {
		t.Errorf("without a key: got %v with details %v, want Unauthenticated from the tap with its ErrorInfo", err, st.Details())
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

// verdictContext is a context that carries a Verdict, as the REST
// gateway's does.
type verdictContext struct {
	context.Context
	v apikey.Verdict
}

func (c verdictContext) Value(key any) any {
	if v, ok := c.v.ContextValue(key); ok {
		return v
	}
	return c.Context.Value(key)
}

// TestVerdict: Authenticate takes the caller of a Verdict that holds a key
// without reading the call's metadata; a Verdict without one (an unknown
// key, or none made by Check) leaves the metadata to be read and judged.
func TestVerdict(t *testing.T) {
	sum := sha256.Sum256([]byte("the-key"))
	key, err := apikey.ParseKey("caller", hex.EncodeToString(sum[:]))
	if err != nil {
		t.Fatal(err)
	}
	a := apikey.New([]apikey.Key{key}, nil)
	if !a.Check("the-key", "").Known() || !a.Check("", "Bearer the-key").Known() || a.Check("guessed", "").Known() || a.Check("", "").Known() {
		t.Fatal("Check: want the key known from x-api-key or a bearer, and nothing else")
	}
	// The metadata holds a wrong key: only the verdict can identify the
	// caller.
	md := metadata.Pairs(apikey.MetadataKey, "guessed")
	ctx := verdictContext{Context: metadata.NewIncomingContext(context.Background(), md), v: a.Check("the-key", "")}
	got, err := a.Authenticate(ctx)
	if err != nil || apikey.IDFromContext(got) != "caller" {
		t.Errorf("with a verdict: got caller %q, error %v; want caller, nil", apikey.IDFromContext(got), err)
	}
	for _, v := range []apikey.Verdict{{}, a.Check("guessed", "")} {
		ctx := verdictContext{Context: metadata.NewIncomingContext(context.Background(), md), v: v}
		if _, err := a.Authenticate(ctx); status.Code(err) != codes.Unauthenticated {
			t.Errorf("with a verdict of no key: got %v, want Unauthenticated", err)
		}
	}
}
