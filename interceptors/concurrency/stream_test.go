package concurrency_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/interceptors/concurrency"
	"github.com/shebasvc/sheba/interceptors/interceptortest"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// TestStreams opens as many health Watch streams as the limit allows on a
// real server, checks that one more is refused with the ErrorInfo, the
// RetryInfo and retry-after, and that a stream that ends gives its slot
// back.
func TestStreams(t *testing.T) {
	const limit = 3
	l := concurrency.NewLimiter(limit)
	conn := interceptortest.ServeServices(t, []grpc.ServerOption{grpc.StreamInterceptor(concurrency.StreamServerInterceptor(l))},
		func(r grpc.ServiceRegistrar) { healthpb.RegisterHealthServer(r, health.NewServer()) })
	client := healthpb.NewHealthClient(conn)
	watch := func(ctx context.Context) (*metadata.MD, error) {
		var header metadata.MD
		w, err := client.Watch(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
		if err == nil {
			_, err = w.Recv()
		}
		return &header, err
	}
	cancels := make([]context.CancelFunc, limit)
	for i := range limit {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		cancels[i] = cancel
		if _, err := watch(ctx); err != nil {
			t.Fatalf("stream %d of %d: %v", i+1, limit, err)
		}
	}
	header, err := watch(t.Context())
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || reason.Of(st) != reason.TooManyStreams {
		t.Fatalf("stream over the limit: got %v, want ResourceExhausted TOO_MANY_STREAMS", err)
	}
	infos, retries := 0, 0
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			infos++
		case *errdetails.RetryInfo:
			retries++
			if got := d.GetRetryDelay().AsDuration(); got != time.Second {
				t.Errorf("RetryInfo: got %v, want 1s", got)
			}
		}
	}
	if infos != 1 || retries != 1 {
		t.Errorf("details: %d ErrorInfo and %d RetryInfo, want one of each", infos, retries)
	}
	if got := header.Get("retry-after"); len(got) != 1 || got[0] != "1" {
		t.Errorf("retry-after: got %q, want 1", got)
	}

	cancels[0]()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err = watch(t.Context()); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a stream after one ended: still %v after 10 s", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := l.InFlight(); got != limit {
		t.Errorf("streams open: got %d, want %d", got, limit)
	}
}
