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
