package timeout_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/interceptortest"
	"github.com/shebasvc/sheba/interceptors/timeout"
)

var info = &grpc.UnaryServerInfo{FullMethod: "/x/Y"}

func TestDeadline(t *testing.T) {
	i := timeout.UnaryServerInterceptor(time.Minute)
	for _, test := range []struct {
		name   string
		client time.Duration // 0: no client deadline
		want   time.Duration
	}{
		{"no client deadline", 0, time.Minute},
		{"shorter client deadline stays", 5 * time.Second, 5 * time.Second},
		{"longer client deadline is cut", time.Hour, time.Minute},
	} {
		t.Run(test.name, func(t *testing.T) {
			ctx := t.Context()
			if test.client > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, test.client)
				defer cancel()
			}
			var got time.Duration
			_, _ = i(ctx, nil, info, func(ctx context.Context, _ any) (any, error) {
				d, ok := ctx.Deadline()
				if !ok {
					t.Fatal("handler has no deadline")
				}
				got = time.Until(d)
				return nil, nil
			})
			if got > test.want || got < test.want-time.Second {
				t.Errorf("handler deadline in %v, want about %v", got, test.want)
			}
		})
	}
}

func TestExpiryIsDeadlineExceeded(t *testing.T) {
	i := timeout.UnaryServerInterceptor(20 * time.Millisecond)
	_, err := i(t.Context(), nil, info, func(ctx context.Context, _ any) (any, error) {
		<-ctx.Done()
		// Whatever the handler makes of it, the caller sees the deadline.
		return nil, errors.New("query canceled")
	})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("got %v, want DeadlineExceeded", err)
	}
	_, err = i(t.Context(), nil, info, func(context.Context, any) (any, error) {
		return nil, status.Error(codes.NotFound, "nope")
	})
	if status.Code(err) != codes.NotFound {
		t.Errorf("handler error within the deadline: got %v, want NotFound", err)
	}
}

// A handler that succeeds after the deadline answers DeadlineExceeded: the
// answer is dropped, as gRPC drops it.
func TestLateSuccessIsDeadlineExceeded(t *testing.T) {
	i := timeout.UnaryServerInterceptor(20 * time.Millisecond)
	resp, err := i(t.Context(), nil, info, func(ctx context.Context, _ any) (any, error) {
		time.Sleep(40 * time.Millisecond)
		return "late", nil
	})
	if status.Code(err) != codes.DeadlineExceeded || resp != nil {
		t.Errorf("got %v, %v; want no answer and DeadlineExceeded", resp, err)
	}
	resp, err = i(t.Context(), nil, info, func(ctx context.Context, _ any) (any, error) { return "on time", nil })
	if err != nil || resp != "on time" {
		t.Errorf("got %v, %v; want the answer", resp, err)
	}
}

func TestServer(t *testing.T) {
	client := interceptortest.Serve(t, timeout.UnaryServerInterceptor(50*time.Millisecond), func(ctx context.Context) (*shebav1.PingResponse, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	start := time.Now()
	_, err := client.Ping(t.Context(), &shebav1.PingRequest{})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("answered after %v: the server deadline did not apply", took)
	}
}

type valueKey struct{}

// TestContext checks that the handler's context behaves as
// context.WithDeadline's would, whether the handler waits on it or not.
func TestContext(t *testing.T) {
	i := timeout.UnaryServerInterceptor(30 * time.Millisecond)
	call := func(parent context.Context, handler func(ctx context.Context)) context.Context {
		t.Helper()
		var inner context.Context
		_, _ = i(parent, nil, info, func(ctx context.Context, _ any) (any, error) {
			inner = ctx
			handler(ctx)
			return nil, nil
		})
		return inner
	}
	parent := context.WithValue(t.Context(), valueKey{}, "v")

	t.Run("waits until the deadline", func(t *testing.T) {
		ctx := call(parent, func(ctx context.Context) {
			if got := ctx.Value(valueKey{}); got != "v" {
				t.Errorf("value: got %v, want the parent's", got)
			}
			if err := ctx.Err(); err != nil {
				t.Errorf("Err before the deadline: %v", err)
			}
			child, cancel := context.WithCancel(ctx)
			defer cancel()
			<-ctx.Done()
			<-child.Done()
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(ctx), context.DeadlineExceeded) || !errors.Is(child.Err(), context.DeadlineExceeded) {
				t.Errorf("after the deadline: Err %v, Cause %v, child's Err %v; want DeadlineExceeded", ctx.Err(), context.Cause(ctx), child.Err())
			}
		})
		<-ctx.Done()
	})
	t.Run("asked past the deadline without waiting", func(t *testing.T) {
		call(parent, func(ctx context.Context) {
			time.Sleep(40 * time.Millisecond)
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Errorf("Err: got %v, want DeadlineExceeded", ctx.Err())
			}
			select {
			case <-ctx.Done():
			default:
				t.Error("Done not closed after Err said DeadlineExceeded")
			}
		})
	})
	t.Run("parent cancelled, Err asked first", func(t *testing.T) {
		p, cancel := context.WithCancel(parent)
		call(p, func(ctx context.Context) {
			cancel()
			if !errors.Is(ctx.Err(), context.Canceled) {
				t.Errorf("Err before Done: got %v, want Canceled", ctx.Err())
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
				t.Error("Done not closed after Err said Canceled")
			}
		})
	})
	t.Run("parent cancelled", func(t *testing.T) {
		p, cancel := context.WithCancel(parent)
		call(p, func(ctx context.Context) {
			cancel()
			<-ctx.Done()
			if !errors.Is(ctx.Err(), context.Canceled) {
				t.Errorf("Err: got %v, want Canceled", ctx.Err())
			}
		})
	})
	for _, waited := range []bool{false, true} {
		ctx := call(parent, func(ctx context.Context) {
			if waited {
				ctx.Done()
			}
		})
		// Once the call is done, as after a context.WithDeadline's cancel.
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("waited %v: Done not closed when the call was done", waited)
		}
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Errorf("waited %v: Err after the call: got %v, want Canceled", waited, ctx.Err())
		}
	}
}
