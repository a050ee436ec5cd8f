package drain_test

import (
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/interceptors/drain"
	"github.com/shebasvc/sheba/interceptors/interceptortest"
)

// TestEndEndsStreams opens a reflection stream (whose handler waits in Recv
// and never looks at its context) and a health Watch (which does), ends
// them, and checks that GracefulStop then returns at once, both streams end
// with Unavailable, and a new stream is refused.
func TestEndEndsStreams(t *testing.T) {
	streams := drain.New()
	srv := grpc.NewServer(grpc.StreamInterceptor(streams.StreamServerInterceptor()))
	reflection.Register(srv)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	refl := interceptortest.ReflectionStream(t, conn)
	watch, err := healthpb.NewHealthClient(conn).Watch(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatalf("Watch before End: %v", err)
	}

	streams.End()
	stopped := make(chan struct{})
	start := time.Now()
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
		t.Logf("GracefulStop returned %v after End", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("GracefulStop still waiting 5 s after End")
	}
	if _, err := refl.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("reflection stream after End: got %v, want Unavailable", err)
	}
	for {
		_, err := watch.Recv()
		if err == nil {
			continue
		}
		if status.Code(err) != codes.Unavailable {
			t.Errorf("Watch after End: got %v, want Unavailable", err)
		}
		break
	}
}

// TestRefusedAfterEnd checks that a stream opened after End is answered
// Unavailable without running its handler.
func TestRefusedAfterEnd(t *testing.T) {
	streams := drain.New()
	streams.End()
	ran := false
	err := streams.StreamServerInterceptor()(nil, nil, &grpc.StreamServerInfo{}, func(any, grpc.ServerStream) error {
		ran = true
		return nil
	})
	if status.Code(err) != codes.Unavailable || ran {
		t.Errorf("got %v (handler ran: %v), want Unavailable and no handler", err, ran)
	}
}
