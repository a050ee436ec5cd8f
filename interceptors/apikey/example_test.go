package apikey_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/interceptors/apikey"
)

// billingAuthenticator accepts one key, of the caller billing: the
// configuration holds only its SHA-256. Ping is public.
func billingAuthenticator() *apikey.Authenticator {
	sum := sha256.Sum256([]byte("secret-key-of-billing"))
	key, err := apikey.ParseKey("billing", hex.EncodeToString(sum[:]))
	if err != nil {
		panic(err)
	}
	return apikey.New([]apikey.Key{key}, []string{"/sheba.v1.PingService/Ping"})
}

// The Authenticator plugs into go-grpc-middleware's auth interceptor.
func Example() {
	authn := billingAuthenticator()
	interceptor := auth.UnaryServerInterceptor(authn.Authenticate)

	handler := func(ctx context.Context, _ any) (any, error) {
		return "caller " + apikey.IDFromContext(ctx), nil
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/sheba.v1.AccountService/GetAccount"}
	call := func(md metadata.MD) {
		ctx := metadata.NewIncomingContext(context.Background(), md)
		ctx = grpc.NewContextWithServerTransportStream(ctx, stream{info.FullMethod})
		out, err := interceptor(ctx, nil, info, handler)
		fmt.Println(out, status.Code(err))
	}
	call(metadata.Pairs("x-api-key", "secret-key-of-billing"))
	call(metadata.Pairs("authorization", "Bearer secret-key-of-billing"))
	call(metadata.Pairs("x-api-key", "guessed"))
	call(metadata.MD{})
	// Output:
	// caller billing OK
	// caller billing OK
	// <nil> Unauthenticated
	// <nil> Unauthenticated
}

// A guard in front of the chain asks whether a call will pass before it
// does any work for it; the chain still decides, and counts the rejection.
func ExampleAuthenticator_Known() {
	authn := billingAuthenticator()
	fmt.Println(authn.Known("secret-key-of-billing", ""), authn.Known("", "Bearer secret-key-of-billing"), authn.Known("guessed", ""))
	fmt.Println(authn.Public("/sheba.v1.PingService/Ping"), authn.Public("/sheba.v1.AccountService/CreateAccount"))
	// Output:
	// true true false
	// true false
}

// stream is the server transport stream a real call has; grpc.Method reads
// the method from it.
type stream struct{ method string }

func (s stream) Method() string             { return s.method }
func (stream) SetHeader(metadata.MD) error  { return nil }
func (stream) SendHeader(metadata.MD) error { return nil }
func (stream) SetTrailer(metadata.MD) error { return nil }
