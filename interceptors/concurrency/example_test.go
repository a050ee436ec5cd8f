package concurrency_test

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/interceptors/concurrency"
)

// With one slot, a call that arrives while another runs is shed at once.
func Example() {
	l := concurrency.NewLimiter(1)
	interceptor := concurrency.UnaryServerInterceptor(l)
	info := &grpc.UnaryServerInfo{FullMethod: "/sheba.v1.AccountService/GetAccount"}

	_, err := interceptor(context.Background(), nil, info, func(ctx context.Context, _ any) (any, error) {
		// A second call while this one holds the only slot.
		_, err := interceptor(ctx, nil, info, func(context.Context, any) (any, error) { return "ran", nil })
		fmt.Println("second:", status.Code(err), l.InFlight())
		return "ok", nil
	})
	fmt.Println("first:", status.Code(err), l.InFlight())
	// Output:
	// second: ResourceExhausted 1
	// first: OK 0
}

// A stream holds its slot while its handler runs: with one slot, a second
// stream is refused until the first has ended.
func ExampleStreamServerInterceptor() {
	l := concurrency.NewLimiter(1)
	interceptor := concurrency.StreamServerInterceptor(l)
	info := &grpc.StreamServerInfo{FullMethod: "/grpc.health.v1.Health/Watch", IsServerStream: true}
	watch := func(any, grpc.ServerStream) error { return nil }

	err := interceptor(nil, stream{}, info, func(srv any, ss grpc.ServerStream) error {
		fmt.Println("second while the first is open:", status.Code(interceptor(nil, stream{}, info, watch)))
		return nil
	})
	fmt.Println("first:", status.Code(err), l.InFlight())
	// Output:
	// second while the first is open: ResourceExhausted
	// first: OK 0
}

// stream stands for the stream grpc-go gives the interceptor.
type stream struct{ grpc.ServerStream }

func (stream) Context() context.Context { return context.Background() }
