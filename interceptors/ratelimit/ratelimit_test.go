package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/interceptortest"
	"github.com/shebasvc/sheba/interceptors/ratelimit"
)

var info = &grpc.UnaryServerInfo{FullMethod: "/sheba.v1.PingService/Ping"}

func ok(context.Context, any) (any, error) { return "ok", nil }

func TestBucket(t *testing.T) {
	b := ratelimit.NewBucket(1, 3) // 3 at once, then one a second
	for i := range 3 {
		if allowed, _ := b.Allow(t.Context()); !allowed {
			t.Fatalf("call %d of the burst was refused", i+1)
		}
	}
	allowed, wait := b.Allow(t.Context())
	if allowed {
		t.Fatal("call past the burst was allowed")
	}
	if wait <= 0 || wait > time.Second {
		t.Errorf("retry after %v, want within (0, 1s]", wait)
	}
	// Refusals do not consume tokens: the next token comes as promised.
	allowed2, wait2 := b.Allow(t.Context())
	if allowed2 || wait2 > wait {
		t.Errorf("second refusal: allowed %v, wait %v; want refused with wait <= %v", allowed2, wait2, wait)
	}
}

func TestPerKey(t *testing.T) {
	type ctxKey struct{}
	id := func(ctx context.Context) string { s, _ := ctx.Value(ctxKey{}).(string); return s }
	p := ratelimit.NewPerKey(1, 2, []string{"a", "b"}, id)
	ctxA := context.WithValue(t.Context(), ctxKey{}, "a")
	ctxB := context.WithValue(t.Context(), ctxKey{}, "b")
	for range 2 {
		if allowed, _ := p.Allow(ctxA); !allowed {
			t.Fatal("key a refused within its burst")
		}
	}
	if allowed, _ := p.Allow(ctxA); allowed {
		t.Error("key a allowed past its burst")
	}
	if allowed, _ := p.Allow(ctxB); !allowed {
		t.Error("key b refused: keys must be limited independently")
	}
	// Unknown and missing ids are not limited here (nor remembered).
	for range 10 {
		if allowed, _ := p.Allow(context.WithValue(t.Context(), ctxKey{}, "rotating")); !allowed {
			t.Fatal("unknown id refused")
		}
	}
}

func TestInterceptorDirect(t *testing.T) {
	rejected := 0
	i := ratelimit.UnaryServerInterceptor(ratelimit.NewBucket(1, 1), ratelimit.WithOnReject(func(context.Context) { rejected++ }))
	if _, err := i(t.Context(), nil, info, ok); err != nil {
		t.Fatalf("first call: %v", err)
	}
	_, err := i(t.Context(), nil, info, ok)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second call: got %v, want ResourceExhausted", err)
	}
	if rejected != 1 {
		t.Errorf("onReject called %d times, want 1", rejected)
	}
}

// TestServer checks the rejection and its retry-after header through a real
// server.
func TestServer(t *testing.T) {
	client := interceptortest.Serve(t, ratelimit.UnaryServerInterceptor(ratelimit.NewBucket(0.5, 1)), interceptortest.Pong)
	if _, err := client.Ping(t.Context(), &shebav1.PingRequest{}); err != nil {
		t.Fatalf("first call: %v", err)
	}
	var header metadata.MD
	_, err := client.Ping(t.Context(), &shebav1.PingRequest{}, grpc.Header(&header))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second call: got %v, want ResourceExhausted", err)
	}
	// One token every 2 s: the next is at most 2 s away.
	if got := header.Get("retry-after"); len(got) != 1 || (got[0] != "1" && got[0] != "2") {
		t.Errorf("retry-after: got %q, want 1 or 2", got)
	}
}

func TestSplit(t *testing.T) {
	type ctxKey struct{}
	id := func(ctx context.Context) string { s, _ := ctx.Value(ctxKey{}).(string); return s }
	keyed := context.WithValue(t.Context(), ctxKey{}, "a")
	anon := t.Context()
	for _, test := range []struct {
		name             string
		keyed, anonymous ratelimit.Limiter
		// wantKeyed and wantAnon are the answers to three calls of each
		// kind, anonymous ones first.
		wantKeyed, wantAnon [3]bool
	}{
		{"both limited", ratelimit.NewBucket(0.001, 2), ratelimit.NewBucket(0.001, 1), [3]bool{true, true, false}, [3]bool{true, false, false}},
		{"anonymous unlimited", ratelimit.NewBucket(0.001, 1), nil, [3]bool{true, false, false}, [3]bool{true, true, true}},
		{"keyed unlimited", nil, ratelimit.NewBucket(0.001, 1), [3]bool{true, true, true}, [3]bool{true, false, false}},
	} {
		t.Run(test.name, func(t *testing.T) {
			s := ratelimit.NewSplit(test.keyed, test.anonymous, id)
			var gotAnon, gotKeyed [3]bool
			for i := range 3 {
				gotAnon[i], _ = s.Allow(anon)
			}
			for i := range 3 {
				gotKeyed[i], _ = s.Allow(keyed)
			}
			if gotAnon != test.wantAnon || gotKeyed != test.wantKeyed {
				t.Errorf("got anonymous %v keyed %v, want %v and %v", gotAnon, gotKeyed, test.wantAnon, test.wantKeyed)
			}
		})
	}
}
