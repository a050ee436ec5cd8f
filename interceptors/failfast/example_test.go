package failfast_test

import (
	"context"
	"fmt"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/interceptors/failfast"
)

// While the database is down, the calls that need it answer Unavailable at
// once; the others still run.
func Example() {
	var dbUp atomic.Bool // a health checker keeps this up to date
	needs := map[string]bool{"/sheba.v1.AccountService/GetAccount": true}
	interceptor := failfast.UnaryServerInterceptor(dbUp.Load, needs, "database unavailable")
	handler := func(context.Context, any) (any, error) { return "ran", nil }

	for _, method := range []string{"/sheba.v1.AccountService/GetAccount", "/sheba.v1.PingService/Ping"} {
		out, err := interceptor(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: method}, handler)
		fmt.Println(method, out, status.Code(err))
	}
	// Output:
	// /sheba.v1.AccountService/GetAccount <nil> Unavailable
	// /sheba.v1.PingService/Ping ran OK
}
