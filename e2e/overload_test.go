package e2e

import (
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/internal/app"
)

// TestAnonymousBucket floods the public Ping without a key under
// limits.rate: the anonymous callers run out of their own bucket (429),
// while a caller with a key still gets through, since the global bucket
// is theirs alone.
func TestAnonymousBucket(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, func(c *config.Config) {
		c.Limits.Rate, c.Limits.Burst = 0.01, 5
		c.Limits.AnonymousRate, c.Limits.AnonymousBurst = 0.01, 3
	})
	anon := shebav1.NewPingServiceClient(e.anon)
	var shed int
	for range 20 {
		_, err := anon.Ping(t.Context(), &shebav1.PingRequest{})
		switch status.Code(err) {
		case codes.OK:
		case codes.ResourceExhausted:
			shed++
		default:
			t.Fatalf("anonymous Ping: %v", err)
		}
	}
	if shed != 17 {
		t.Errorf("anonymous Pings shed: got %d of 20, want 17 (a bucket of 3)", shed)
	}
	for i := range 5 {
		if _, err := e.ping.Ping(t.Context(), &shebav1.PingRequest{}); err != nil {
			t.Errorf("keyed Ping %d after the anonymous flood: %v, want it within the global burst of 5", i, err)
		}
	}
	if _, err := e.ping.Ping(t.Context(), &shebav1.PingRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("keyed Ping past the global burst: got %v, want ResourceExhausted", err)
	}
}

// TestMaxConcurrentStreams checks that one gRPC connection carries at most
// grpc.max_concurrent_streams calls at once: 8 slow calls on one
// connection run 2 at a time, and all succeed.
func TestMaxConcurrentStreams(t *testing.T) {
	t.Parallel()
	g := &gauge{}
	e := newTestEnvWith(t, nil, []app.Option{slowHook(g, 200*time.Millisecond)}, func(c *config.Config) {
		c.GRPC.MaxConcurrentStreams = 2
	})
	id := e.insertAccount(t, "streams")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, err := e.account.GetAccount(t.Context(), &shebav1.GetAccountRequest{AccountId: id}); err != nil {
				t.Errorf("GetAccount: %v", err)
			}
		})
	}
	wg.Wait()
	if peak := g.peak.Load(); peak != 2 {
		t.Errorf("calls at once on one connection: got %d, want 2", peak)
	}
}
