package webhooks

import (
	"context"
	"sync"
	"time"
)

// Limiter caps the attempts in flight to each endpoint
// (webhooks.per_endpoint_concurrency). Acquire takes a slot of the
// endpoint and returns its release, which the caller calls once, when its
// attempt has ended; or it reports ok false when no slot is free. Either
// way it may wait a moment for one, but not for long: a held attempt goes
// back to the queue (not counted as an attempt) and comes back soon. An
// error (the limiter's own store failed) holds the attempt back as well.
// Implementations are safe for concurrent use.
type Limiter interface {
	Acquire(ctx context.Context, endpointID string) (release func(), ok bool, err error)
}

// NewLocalLimiter returns a Limiter of perEndpoint slots per endpoint kept
// in this process: N replicas have N times as many. An Acquire waits up to
// 100 ms for a slot, which lets a fast endpoint's backlog flow without
// putting jobs back in the queue and holds no worker long for an endpoint
// that is slow.
func NewLocalLimiter(perEndpoint int) Limiter {
	return &slots{max: perEndpoint, sems: map[string]chan struct{}{}}
}

// slots is the Limiter of NewLocalLimiter.
type slots struct {
	max int

	mu   sync.Mutex
	sems map[string]chan struct{}
}

func (s *slots) Acquire(ctx context.Context, endpoint string) (func(), bool, error) {
	s.mu.Lock()
	sem, ok := s.sems[endpoint]
	if !ok {
		sem = make(chan struct{}, s.max)
		s.sems[endpoint] = sem
	}
	s.mu.Unlock()
	release := func() { <-sem }
	select {
	case sem <- struct{}{}:
		return release, true, nil
	default:
	}
	t := time.NewTimer(slotWait)
	defer t.Stop()
	select {
	case sem <- struct{}{}:
		return release, true, nil
	case <-t.C:
		return nil, false, nil
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}
