package standby_test

import (
	"context"
	"fmt"

	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/standby"
	"github.com/shebasvc/sheba/store"
)

// A read-only call runs on the standby when it answers in time; this one
// does not (nothing listens on port 1), so the call runs on the primary:
// its context is the one it came with.
func Example() {
	ctx := context.Background()
	s, err := store.OpenStandby(ctx, "postgres://sheba@127.0.0.1:1/sheba", 4, tracenoop.NewTracerProvider())
	if err != nil {
		panic(err)
	}
	defer s.Close()
	methods := standby.Methods{
		ReadOnly: map[string]bool{shebav1.AccountService_GetAccount_FullMethodName: true},
		Writes:   map[string]bool{shebav1.AccountService_CreateAccount_FullMethodName: true},
	}
	caller := func(context.Context) string { return "" } // apikey.IDFromContext
	interceptor := standby.UnaryServerInterceptor(s, methods, caller)

	handler := func(ctx context.Context, _ any) (any, error) {
		// The handler's store calls with ctx run where the interceptor
		// decided.
		return "ran", nil
	}
	info := &grpc.UnaryServerInfo{FullMethod: shebav1.AccountService_GetAccount_FullMethodName}
	out, err := interceptor(ctx, nil, info, handler)
	fmt.Println(out, err)
	// Output:
	// ran <nil>
}
