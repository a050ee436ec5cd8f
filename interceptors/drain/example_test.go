package drain_test

import (
	"google.golang.org/grpc"

	"github.com/shebasvc/sheba/interceptors/drain"
)

// The drainer's interceptor goes on the server; End runs at shutdown,
// before GracefulStop, so that open streams do not hold it.
func Example() {
	streams := drain.New()
	srv := grpc.NewServer(grpc.StreamInterceptor(streams.StreamServerInterceptor()))
	// ... serve until the signal ...
	streams.End()
	srv.GracefulStop()
}
