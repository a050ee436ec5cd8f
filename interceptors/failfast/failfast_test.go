package failfast_test

import (
	"context"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/failfast"
	"github.com/shebasvc/sheba/interceptors/interceptortest"
)

func TestDirect(t *testing.T) {
	var up atomic.Bool
	i := failfast.UnaryServerInterceptor(up.Load, map[string]bool{"/db/Query": true}, "database unavailable")
	ran := 0
	h := func(context.Context, any) (any, error) { ran++; return "ok", nil }
	call := func(method string) error {
		_, err := i(t.Context(), nil, &grpc.UnaryServerInfo{FullMethod: method}, h)
		return err
	}
	if err := call("/db/Query"); status.Code(err) != codes.Unavailable || ran != 0 {
		t.Errorf("down, needs it: got %v (ran %d), want Unavailable without running", err, ran)
	}
	if err := call("/ping/Ping"); err != nil || ran != 1 {
		t.Errorf("down, does not need it: got %v (ran %d), want it to run", err, ran)
	}
	up.Store(true)
	if err := call("/db/Query"); err != nil || ran != 2 {
		t.Errorf("up: got %v (ran %d), want it to run", err, ran)
	}
}

func TestServer(t *testing.T) {
	client := interceptortest.Serve(t, failfast.UnaryServerInterceptor(func() bool { return false },
		map[string]bool{"/sheba.v1.PingService/Ping": true}, "database unavailable"), interceptortest.Pong)
	_, err := client.Ping(t.Context(), &shebav1.PingRequest{})
	if st, _ := status.FromError(err); st.Code() != codes.Unavailable || st.Message() != "database unavailable" {
		t.Errorf("got %v, want Unavailable \"database unavailable\"", err)
	}
}
