package health

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Checker pings the database on an interval and is the one source of truth
// for readiness: it drives both the grpc.health.v1 server (for "" and every
// service it is given) and GET /readyz. It is safe for concurrent use.
type Checker struct {
	grpc     *health.Server
	ping     func(context.Context) error
	interval time.Duration
	services []string

	// dbUp says whether the database is up, read on the hot path by the
	// fail-fast gate; it keeps being updated during shutdown. It starts
	// true: until the first ping answers, calls try the database (and fail
	// as Unavailable by themselves if it is down).
	dbUp atomic.Bool

	// Only the run goroutine uses these two.
	failures int  // consecutive failed pings
	answered bool // some ping has succeeded

	// watching ends when EndWatches ends the Watch streams: a context for
	// its cancellation alone, which context.AfterFunc follows without a
	// goroutine per stream.
	watching    context.Context
	endWatching context.CancelFunc

	mu           sync.Mutex
	ready        bool
	reason       string
	shuttingDown bool
}

// failuresToDown is how many pings in a row must fail before a database
// that has answered counts as down: under load a single ping can miss its
// deadline, and one miss must not turn every business call away. An outage
// is therefore seen within two intervals.
const failuresToDown = 2

// NewChecker returns a Checker that calls ping every interval and reports
// for the services named (and for ""). It starts not ready, and pings
// nothing until Run.
func NewChecker(ping func(context.Context) error, interval time.Duration, services []string) *Checker {
	h := &Checker{
		grpc:     health.NewServer(),
		ping:     ping,
		interval: interval,
		services: services,
		reason:   "starting",
	}
	h.watching, h.endWatching = context.WithCancel(context.Background())
	h.dbUp.Store(true)
	h.setGRPC(healthpb.HealthCheckResponse_NOT_SERVING)
	return h
}

// Run checks at once and then every interval until ctx is done.
func (h *Checker) Run(ctx context.Context) {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		h.check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (h *Checker) check(ctx context.Context) {
	// A ping that takes longer than the interval counts as down.
	ctx, cancel := context.WithTimeout(ctx, h.interval)
	defer cancel()
	err := h.ping(ctx)
	if err == nil {
		h.failures, h.answered = 0, true
	} else {
		h.failures++
	}
	up := err == nil || (h.answered && h.failures < failuresToDown)
	h.dbUp.Store(up)

	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shuttingDown {
		return
	}
	ready, reason := up, ""
	if !up {
		// The driver's text can name hosts and users; say only what failed.
		reason = "database unreachable"
	}
	if ready == h.ready && reason == h.reason {
		return
	}
	h.ready, h.reason = ready, reason
	if ready {
		h.setGRPC(healthpb.HealthCheckResponse_SERVING)
	} else {
		h.setGRPC(healthpb.HealthCheckResponse_NOT_SERVING)
	}
}

func (h *Checker) setGRPC(s healthpb.HealthCheckResponse_ServingStatus) {
	h.grpc.SetServingStatus("", s)
	for _, svc := range h.services {
		h.grpc.SetServingStatus(svc, s)
	}
}

// Shutdown turns every status NOT_SERVING for good; Watch streams see it.
func (h *Checker) Shutdown() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shuttingDown {
		return
	}
	h.shuttingDown = true
	h.ready, h.reason = false, "shutting down"
	h.grpc.Shutdown()
}

// EndWatches ends the Watch streams of the grpc.health.v1 service, which
// never end by themselves and would hold a graceful stop open until its
// timeout. Call it after Shutdown, once the watchers have had time to see
// NOT_SERVING.
func (h *Checker) EndWatches() {
	h.endWatching()
}

// DatabaseUp reports whether the database counts as up: it answered the last
// ping, or has answered before and missed fewer than two in a row. It is
// true until the first ping has been made.
func (h *Checker) DatabaseUp() bool { return h.dbUp.Load() }

// Ready reports whether the service is ready: what /readyz answers 200 to.
func (h *Checker) Ready() bool {
	ready, _ := h.state()
	return ready
}

func (h *Checker) state() (ready bool, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ready, h.reason
}

// ServeHTTP answers GET /readyz: 200 {"status":"ok"} while ready, else 503
// {"status":"unavailable","reason":"..."} (docs/operations.md#health).
func (h *Checker) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	ready, reason := h.state()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if ready {
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	body, _ := json.Marshal(struct {
		Status string `json:"status"`
		Reason string `json:"reason"`
	}{"unavailable", reason})
	_, _ = w.Write(append(body, '\n'))
}

// Service returns the grpc.health.v1 server to register on the grpc.Server.
// Its statuses follow the checks; its Watch streams end at EndWatches.
func (h *Checker) Service() healthpb.HealthServer {
	return healthService{Server: h.grpc, watching: h.watching}
}

// healthService is the grpc.health.v1 server whose Watch streams end when
// watching does, so that they do not hold a graceful stop open.
type healthService struct {
	*health.Server
	watching context.Context
}

// Watch streams status changes until the client leaves or the server stops.
// It costs no goroutine beyond the stream's own: every open Watch is one
// that keyless callers can hold (docs/operations.md#slow-clients).
func (h healthService) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	defer context.AfterFunc(h.watching, cancel)()
	return h.Server.Watch(req, watchStream{Health_WatchServer: stream, ctx: ctx})
}

type watchStream struct {
	healthpb.Health_WatchServer
	ctx context.Context
}

func (w watchStream) Context() context.Context { return w.ctx }
