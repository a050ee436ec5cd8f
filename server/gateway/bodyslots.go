package gateway

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The body slots: at most http.max_concurrent_bodies request bodies are read
// and decoded at once (docs/operations.md#slow-clients). Bodies are read
// before the chain runs, so without this bound every open connection could
// hold a body buffer (and a decompressor) of its own; with it, that memory
// is bounded by the slots, and the read deadline (http.read_timeout) bounds
// how long a slow client holds one. Only requests with a valid key take a
// slot: those to a method that needs one have lost their body by then
// (keycheck.go), and those to a public method read theirs within a small
// bound of their own, without a slot (publicbody.go), so callers without a
// key cannot hold the slots that keyed callers need. A request that finds no free slot waits up to bodySlotWait,
// then is answered 429 with Retry-After: the load is shed at once rather
// than queued without bound, as the concurrency limit does for handlers.

// bodySlotWait is how long a request waits for a body slot: long enough for
// a burst of ordinary bodies (read in microseconds) to pass, short enough
// that a crowd of slow clients turns callers away quickly.
const bodySlotWait = time.Second

// errNoBodySlot answers a request that found no body slot in time.
var errNoBodySlot = status.Error(codes.ResourceExhausted, "too many request bodies in progress; retry later")

// bodySlots is the bound on request bodies read at once.
type bodySlots struct {
	sem *semaphore.Weighted
	// writeTimeout (http.write_timeout; 0: none) is given to the answer
	// again once the body is read: net/http counts it from the request's
	// headers, so a body that took most of http.read_timeout to arrive
	// would leave its answer no time to be written.
	writeTimeout time.Duration
}

func newBodySlots(n int, writeTimeout time.Duration) *bodySlots {
	return &bodySlots{sem: semaphore.NewWeighted(int64(max(n, 1))), writeTimeout: writeTimeout}
}

// acquire takes a slot for r's body, if it has one, and returns r with a
// body that gives the slot back once read to its end or closed, and a
// release func for when the request is done; answered is true if no slot
// was free in time and a 429 was written.
func (s *bodySlots) acquire(gw *runtime.ServeMux, w http.ResponseWriter, r *http.Request) (_ *http.Request, release func(), answered bool) {
	r, release, busy := s.take(w, r)
	if busy {
		w.Header().Set(retryAfterHeader, "1")
		writeError(gw, w, r, errNoBodySlot)
		return r, nil, true
	}
	return r, release, false
}

// take is acquire without the answer: busy is true if no slot was free in
// time, and then the caller answers errNoBodySlot. Once the body is read
// (or the slot given back), the answer on w has writeTimeout from then to
// be written.
func (s *bodySlots) take(w http.ResponseWriter, r *http.Request) (_ *http.Request, release func(), busy bool) {
	if bodiless(r) {
		return r, func() {}, false
	}
	if !s.sem.TryAcquire(1) && !s.wait(r.Context()) {
		return r, nil, true
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			s.sem.Release(1)
			if s.writeTimeout > 0 {
				// A writer that cannot move its deadline keeps net/http's.
				_ = ExtendWriteDeadline(w, s.writeTimeout)
			}
		})
	}
	r.Body = &slotBody{ReadCloser: r.Body, release: release}
	return r, release, false
}

// wait waits up to bodySlotWait for a slot; the timer is made only when
// no slot is free at once.
func (s *bodySlots) wait(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, bodySlotWait)
	defer cancel()
	return s.sem.Acquire(ctx, 1) == nil
}

// slotBody gives its slot back at the end of the body, when it is no
// longer being read: the handler may run much longer than that.
type slotBody struct {
	io.ReadCloser
	release func()
}

func (b *slotBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.release()
	}
	return n, err
}

func (b *slotBody) Close() error {
	b.release()
	return b.ReadCloser.Close()
}
