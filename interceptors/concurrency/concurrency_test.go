package concurrency_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/concurrency"
	"github.com/shebasvc/sheba/interceptors/interceptortest"
)

func TestLimiter(t *testing.T) {
	l := concurrency.NewLimiter(2)
	if !l.TryAcquire() || !l.TryAcquire() {
		t.Fatal("free slots refused")
	}
	if l.TryAcquire() {
		t.Fatal("third slot granted with max 2")
	}
	if got := l.InFlight(); got != 2 {
		t.Errorf("in flight: got %d, want 2", got)
	}
	l.Release()
	if !l.TryAcquire() {
		t.Error("released slot refused")
	}
}

func TestInterceptorDirect(t *testing.T) {
	l := concurrency.NewLimiter(1)
	shed := 0
	i := concurrency.UnaryServerInterceptor(l, concurrency.WithOnReject(func(context.Context) { shed++ }))
	info := &grpc.UnaryServerInfo{FullMethod: "/x/Y"}
	var inner error
	_, err := i(t.Context(), nil, info, func(ctx context.Context, _ any) (any, error) {
		// While this call holds the only slot, another is shed.
		_, inner = i(ctx, nil, info, func(context.Context, any) (any, error) { return "nested", nil })
		return "ok", nil
	})
	if err != nil {
		t.Fatalf("outer call: %v", err)
	}
	if status.Code(inner) != codes.ResourceExhausted || shed != 1 {
		t.Errorf("inner call: got %v (shed %d), want ResourceExhausted once", inner, shed)
	}
	if l.InFlight() != 0 {
		t.Errorf("in flight after the calls: %d, want 0", l.InFlight())
	}
	// A panicking handler still frees its slot.
	func() {
		defer func() { _ = recover() }()
		_, _ = i(t.Context(), nil, info, func(context.Context, any) (any, error) { panic("boom") })
	}()
	if l.InFlight() != 0 {
		t.Errorf("in flight after a panic: %d, want 0", l.InFlight())
	}
}

// TestServer holds 3 slots with blocked calls and checks that more calls
// are shed at once with retry-after, and never run.
func TestServer(t *testing.T) {
	l := concurrency.NewLimiter(3)
	var inside, peak atomic.Int64
	release := make(chan struct{})
	entered := make(chan struct{}, 3)
	client := interceptortest.Serve(t, concurrency.UnaryServerInterceptor(l), func(ctx context.Context) (*shebav1.PingResponse, error) {
		n := inside.Add(1)
		defer inside.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		entered <- struct{}{}
		<-release
		return &shebav1.PingResponse{Message: "pong"}, nil
	})
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if _, err := client.Ping(t.Context(), &shebav1.PingRequest{}); err != nil {
				t.Errorf("held call: %v", err)
			}
		})
	}
	for range 3 {
		<-entered
	}
	for range 5 {
		var header metadata.MD
		_, err := client.Ping(t.Context(), &shebav1.PingRequest{}, grpc.Header(&header))
		if status.Code(err) != codes.ResourceExhausted {
			t.Errorf("call over the limit: got %v, want ResourceExhausted", err)
		}
		if got := header.Get("retry-after"); len(got) != 1 || got[0] != "1" {
			t.Errorf("retry-after: got %q, want 1", got)
		}
	}
	close(release)
	wg.Wait()
	if peak.Load() != 3 {
		t.Errorf("peak inside the handler: %d, want 3", peak.Load())
	}
}
