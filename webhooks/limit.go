package webhooks

import (
	"sync"
	"time"
)

// slots caps the attempts in flight to each endpoint. It is safe for
// concurrent use.
type slots struct {
	max int

	mu    sync.Mutex
	sems  map[string]chan struct{}
	total int
}

func newSlots(max int) *slots {
	return &slots{max: max, sems: map[string]chan struct{}{}}
}

// acquire takes a slot of endpoint, waiting up to wait for one, and reports
// whether it got one. A short wait lets a fast endpoint's backlog flow
// without putting jobs back in the queue, and keeps the worker from being
// held long by an endpoint that is slow.
func (s *slots) acquire(endpoint string, wait time.Duration) bool {
	s.mu.Lock()
	sem, ok := s.sems[endpoint]
	if !ok {
		sem = make(chan struct{}, s.max)
		s.sems[endpoint] = sem
	}
	s.mu.Unlock()
	select {
	case sem <- struct{}{}:
	default:
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case sem <- struct{}{}:
		case <-t.C:
			return false
		}
	}
	s.mu.Lock()
	s.total++
	s.mu.Unlock()
	return true
}

// release gives back a slot of endpoint.
func (s *slots) release(endpoint string) {
	s.mu.Lock()
	sem := s.sems[endpoint]
	s.total--
	s.mu.Unlock()
	<-sem
}

// inFlight returns the attempts in flight to all endpoints.
func (s *slots) inFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}
