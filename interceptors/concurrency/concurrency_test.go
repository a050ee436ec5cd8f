package concurrency_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	l.Release(time.Now(), true)
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

// recorder is a Limiter that admits everything and records how each call
// was released.
type recorder struct {
	concurrency.Fixed
	measured []bool
}

func (r *recorder) TryAcquire() bool { return true }
func (r *recorder) Release(_ time.Time, measured bool) {
	r.measured = append(r.measured, measured)
}

// TestMeasured checks what the limiter learns from: finished calls and
// failed ones, but not those the caller cancelled.
func TestMeasured(t *testing.T) {
	r := &recorder{}
	i := concurrency.UnaryServerInterceptor(r)
	info := &grpc.UnaryServerInfo{FullMethod: "/x/Y"}
	cancelledCtx, cancel := context.WithCancel(t.Context())
	cancel()
	for _, test := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"ok", t.Context(), nil, true},
		{"deadline", t.Context(), status.Error(codes.DeadlineExceeded, "late"), true},
		{"not found", t.Context(), status.Error(codes.NotFound, "no"), true},
		{"client cancelled", cancelledCtx, status.Error(codes.Canceled, "gone"), false},
		{"handler saw cancel", t.Context(), context.Canceled, false},
	} {
		r.measured = nil
		_, _ = i(test.ctx, nil, info, func(context.Context, any) (any, error) { return nil, test.err })
		if len(r.measured) != 1 || r.measured[0] != test.want {
			t.Errorf("%s: released %v, want [%v]", test.name, r.measured, test.want)
		}
	}
}
