package standby_test

import (
	"context"
	"fmt"

	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"

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
		ReadOnly: map[string]bool{"/sheba.v1.AccountService/GetAccount": true},
		Writes:   map[string]bool{"/sheba.v1.AccountService/CreateAccount": true},
	}
	caller := func(context.Context) string { return "" } // apikey.IDFromContext
	interceptor := standby.UnaryServerInterceptor(s, methods, caller)

	handler := func(ctx context.Context, _ any) (any, error) {
		// The handler's store calls with ctx run where the interceptor
		// decided.
		return "ran", nil
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/sheba.v1.AccountService/GetAccount"}
	out, err := interceptor(ctx, nil, info, handler)
	fmt.Println(out, err)
	// Output:
	// ran <nil>
}
