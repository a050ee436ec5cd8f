package ratelimit_test

import (
	"context"
	"strconv"
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
		if !b.Allow(t.Context()).Allowed {
			t.Fatalf("call %d of the burst was refused", i+1)
		}
	}
	d := b.Allow(t.Context())
	allowed, wait := d.Allowed, d.RetryAfter
	if allowed {
		t.Fatal("call past the burst was allowed")
	}
	if wait <= 0 || wait > time.Second {
		t.Errorf("retry after %v, want within (0, 1s]", wait)
	}
	// Refusals do not consume tokens: the next token comes as promised.
	d2 := b.Allow(t.Context())
	allowed2, wait2 := d2.Allowed, d2.RetryAfter
	if allowed2 || wait2 > wait {
		t.Errorf("second refusal: allowed %v, wait %v; want refused with wait <= %v", allowed2, wait2, wait)
	}
}

// TestBucketOnItsClock checks StartEmpty and WithClock: the bucket holds
// nothing at first, and refills only as its clock runs.
func TestBucketOnItsClock(t *testing.T) {
	now := time.Unix(1000, 0)
	b := ratelimit.NewBucket(10, 5, ratelimit.StartEmpty(), ratelimit.WithClock(func() time.Time { return now }))
	if d := b.Allow(t.Context()); d.Allowed || d.Remaining != 0 || d.RetryAfter != 100*time.Millisecond {
		t.Fatalf("first call: %+v; want refused, r=0, retry after 100ms (one token at 10/s)", d)
	}
	// Real time passes, the bucket's clock does not: still nothing.
	time.Sleep(150 * time.Millisecond)
	if b.Allow(t.Context()).Allowed {
		t.Fatal("allowed while its clock stood still")
	}
	now = now.Add(300 * time.Millisecond)
	for i := range 3 {
		if !b.Allow(t.Context()).Allowed {
			t.Fatalf("call %d refused after 300ms of its clock at 10/s", i+1)
		}
	}
	if b.Allow(t.Context()).Allowed {
		t.Error("a fourth call allowed after 300ms at 10/s")
	}
	// A clock that runs long fills the bucket to its burst, no more.
	now = now.Add(time.Hour)
	n := 0
	for b.Allow(t.Context()).Allowed {
		n++
	}
	if n != 5 {
		t.Errorf("allowed %d after an hour, want the burst, 5", n)
	}
}

func TestPerKey(t *testing.T) {
	type ctxKey struct{}
	id := func(ctx context.Context) string { s, _ := ctx.Value(ctxKey{}).(string); return s }
	p := ratelimit.NewPerKey(1, 2, []string{"a", "b"}, id)
	ctxA := context.WithValue(t.Context(), ctxKey{}, "a")
	ctxB := context.WithValue(t.Context(), ctxKey{}, "b")
	for range 2 {
		if !p.Allow(ctxA).Allowed {
			t.Fatal("key a refused within its burst")
		}
	}
	if p.Allow(ctxA).Allowed {
		t.Error("key a allowed past its burst")
	}
	if !p.Allow(ctxB).Allowed {
		t.Error("key b refused: keys must be limited independently")
	}
	// Unknown and missing ids are not limited here (nor remembered).
	for range 10 {
		if !p.Allow(context.WithValue(t.Context(), ctxKey{}, "rotating")).Allowed {
			t.Fatal("unknown id refused")
		}
	}
}

func TestInterceptorDirect(t *testing.T) {
	rejected := 0
	i := ratelimit.UnaryServerInterceptor(ratelimit.Limit{Limiter: ratelimit.NewBucket(1, 1), Options: []ratelimit.Option{ratelimit.WithOnReject(func(context.Context) { rejected++ })}})
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
	client := interceptortest.Serve(t, ratelimit.UnaryServerInterceptor(ratelimit.Limit{Limiter: ratelimit.NewBucket(0.5, 1)}), interceptortest.Pong)
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

func TestPolicyOf(t *testing.T) {
	for _, test := range []struct {
		rate  float64
		burst int
		want  ratelimit.Policy
	}{
		{50, 50, ratelimit.Policy{Quota: 50, Window: time.Second}},
		{10, 25, ratelimit.Policy{Quota: 25, Window: 3 * time.Second}},
		{100, 10, ratelimit.Policy{Quota: 10, Window: time.Second}},
		{0.5, 1, ratelimit.Policy{Quota: 1, Window: 2 * time.Second}},
	} {
		if got := ratelimit.PolicyOf(test.rate, test.burst); got != test.want {
			t.Errorf("PolicyOf(%v, %d): got %+v, want %+v", test.rate, test.burst, got, test.want)
		}
	}
}

// TestFields checks the syntax of the fields through a real server: r
// counts down as calls are made, q and w stay, and the 429's Retry-After
// is never earlier than its t.
func TestFields(t *testing.T) {
	client := interceptortest.Serve(t, ratelimit.UnaryServerInterceptor(ratelimit.Limit{Limiter: ratelimit.NewBucket(1, 3), Options: []ratelimit.Option{ratelimit.WithPolicyName("global")}}), interceptortest.Pong)
	last := int64(-1)
	for i := range 4 {
		var header metadata.MD
		_, err := client.Ping(t.Context(), &shebav1.PingRequest{}, grpc.Header(&header))
		policy, current := header.Get(ratelimit.PolicyKey), header.Get(ratelimit.StateKey)
		if len(policy) != 1 || len(current) != 1 {
			t.Fatalf("call %d: fields %q, %q; want one of each", i+1, policy, current)
		}
		name, q, w, r, tt := interceptortest.RateLimitFields(t, policy, current)
		if name != "global" || q != 3 || w != 3 {
			t.Errorf("call %d: policy %q q=%d w=%d, want \"global\" q=3 w=3", i+1, name, q, w)
		}
		if last >= 0 && r >= last && last > 0 {
			t.Errorf("call %d: r=%d after r=%d, want it to decrease", i+1, r, last)
		}
		last = r
		if i < 3 {
			if err != nil || r != int64(2-i) {
				t.Errorf("call %d: got %v, r=%d; want OK, r=%d", i+1, err, r, 2-i)
			}
			continue
		}
		if status.Code(err) != codes.ResourceExhausted || r != 0 {
			t.Fatalf("call 4: got %v, r=%d; want ResourceExhausted, r=0", err, r)
		}
		ra, perr := strconv.ParseInt(header.Get("retry-after")[0], 10, 64)
		if perr != nil || ra < tt || tt < 1 {
			t.Errorf("429: retry-after %v, t=%d; want whole seconds >= t >= 1", header.Get("retry-after"), tt)
		}
	}
}

// TestTightest puts a global and a per-key limit in one interceptor: the
// fields describe the one with fewer calls left, and only one set is sent.
func TestTightest(t *testing.T) {
	type ctxKey struct{}
	id := func(ctx context.Context) string { s, _ := ctx.Value(ctxKey{}).(string); return s }
	limits := ratelimit.UnaryServerInterceptor(
		ratelimit.Limit{Limiter: ratelimit.NewBucket(100, 10), Options: []ratelimit.Option{ratelimit.WithPolicyName("global")}},
		ratelimit.Limit{Limiter: ratelimit.NewPerKey(1, 2, []string{"a"}, id), Options: []ratelimit.Option{ratelimit.WithPolicyName("key")}},
	)
	chained := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return limits(context.WithValue(ctx, ctxKey{}, "a"), req, info, h)
	}
	client := interceptortest.Serve(t, chained, interceptortest.Pong)
	for i, want := range []struct {
		name string
		r    int64
		code codes.Code
	}{{"key", 1, codes.OK}, {"key", 0, codes.OK}, {"key", 0, codes.ResourceExhausted}} {
		var header metadata.MD
		_, err := client.Ping(t.Context(), &shebav1.PingRequest{}, grpc.Header(&header))
		if len(header.Get(ratelimit.PolicyKey)) != 1 || len(header.Get(ratelimit.StateKey)) != 1 {
			t.Fatalf("call %d: fields %q; want exactly one of each", i+1, header)
		}
		name, _, _, r, _ := interceptortest.RateLimitFields(t, header.Get(ratelimit.PolicyKey), header.Get(ratelimit.StateKey))
		if name != want.name || r != want.r || status.Code(err) != want.code {
			t.Errorf("call %d: got %q r=%d %v, want %q r=%d %v", i+1, name, r, status.Code(err), want.name, want.r, want.code)
		}
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
				gotAnon[i] = s.Allow(anon).Allowed
			}
			for i := range 3 {
				gotKeyed[i] = s.Allow(keyed).Allowed
			}
			if gotAnon != test.wantAnon || gotKeyed != test.wantKeyed {
				t.Errorf("got anonymous %v keyed %v, want %v and %v", gotAnon, gotKeyed, test.wantAnon, test.wantKeyed)
			}
		})
	}
}
