package hook

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shebasvc/sheba/interceptors/callinfo"
)

// BenchmarkCachedDecision is the cost of a call the cache answers: the
// hook's whole share of a call in the hook-cached row of make bench.
func BenchmarkCachedDecision(b *testing.B) {
	var calls atomic.Int32
	intercept := UnaryServerInterceptor(answering(Decision{CacheFor: time.Hour}, &calls), WithCache(100), WithMetrics(NewMetrics()))
	ctx, _ := restCtx("bench", callinfo.HTTP{Method: http.MethodGet, Target: "/v1/ping", Host: "localhost", Header: http.Header{"User-Agent": {"wrk"}}})
	req := subscriptionReq("pro")
	var h handled
	b.ReportAllocs()
	for b.Loop() {
		if _, err := intercept(ctx, req, info, h.handler); err != nil {
			b.Fatal(err)
		}
	}
	if calls.Load() != 1 {
		b.Fatalf("the hook got %d calls, want 1", calls.Load())
	}
}
