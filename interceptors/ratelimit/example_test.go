package ratelimit_test

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/interceptors/ratelimit"
)

// A global bucket of 2 tokens refilled at 1 a second: the third call in a
// row is rejected.
func Example() {
	interceptor := ratelimit.UnaryServerInterceptor(ratelimit.Limit{Limiter: ratelimit.NewBucket(1, 2)})
	info := &grpc.UnaryServerInfo{FullMethod: "/sheba.v1.AccountService/GetAccount"}
	handler := func(context.Context, any) (any, error) { return "ok", nil }
	for range 3 {
		_, err := interceptor(context.Background(), nil, info, handler)
		fmt.Println(status.Code(err))
	}
	// Output:
	// OK
	// OK
	// ResourceExhausted
}

// Each API key draws from its own bucket; the key id comes from the
// context, where authentication put it.
func ExampleNewPerKey() {
	type callerKey struct{}
	id := func(ctx context.Context) string { s, _ := ctx.Value(callerKey{}).(string); return s }
	interceptor := ratelimit.UnaryServerInterceptor(ratelimit.Limit{Limiter: ratelimit.NewPerKey(1, 1, []string{"billing", "reports"}, id)})
	info := &grpc.UnaryServerInfo{FullMethod: "/sheba.v1.AccountService/GetAccount"}
	handler := func(context.Context, any) (any, error) { return "ok", nil }
	for _, caller := range []string{"billing", "billing", "reports"} {
		_, err := interceptor(context.WithValue(context.Background(), callerKey{}, caller), nil, info, handler)
		fmt.Println(caller, status.Code(err))
	}
	// Output:
	// billing OK
	// billing ResourceExhausted
	// reports OK
}
