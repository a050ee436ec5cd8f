package metrics

import (
	"context"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/interceptors/callinfo"
)

// Rejection reasons of sheba_rejected_total.
const (
	ReasonUnauthenticated = "unauthenticated"
	ReasonRate            = "rate"
	ReasonKeyRate         = "key_rate"
	ReasonInflight        = "inflight"
)

// handlingBuckets resolve sub-millisecond calls (a ping takes tens of µs)
// up to the 5 s default deadline.
var handlingBuckets = handlingBucketsArray[:]

var handlingBucketsArray = [...]float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
}

// numCodes is the number of gRPC codes (OK to Unauthenticated), the codes
// whose series are cached.
const numCodes = int(codes.Unauthenticated) + 1

// Metrics holds the collectors. It is safe for concurrent use.
//
// The grpc_server_* family is the one go-grpc-middleware's prometheus
// provider makes (names, help, labels and what counts when; a test holds the
// two side by side), written here rather than used from it: that provider
// hashes the label values of five series on every call and allocates a
// reporter and its options for each, which made the metrics links the
// costliest of the chain after the request log (BenchmarkChain: 2 of 20
// allocations and ~20% of the chain's CPU, mostly hashLabelValues). Here
// each series of a served method is looked up once and kept, and one link
// feeds both families.
type Metrics struct {
	started, handled, received, sent *prometheus.CounterVec
	seconds                          *prometheus.HistogramVec
	requests                         *prometheus.CounterVec
	rejected                         *prometheus.CounterVec

	// methods holds the series of the served methods; it is not changed
	// after New.
	methods map[string]*method

	// callers holds the sheba_requests_total series (*series) by method
	// and caller (callerKey): written once per key, on a caller's first
	// call of a method, then only read, which sync.Map does without a lock.
	callers sync.Map

	// now is the clock of the handling time and of the exemplars'
	// refresh (time.Now; a test sets its own).
	now func() time.Time
	// epoch is when New ran: an exemplar's time is kept as the monotonic
	// time since it.
	epoch time.Time
}

// exemplarEvery is how often, at most, a series of the grpc_server_*
// family (a histogram: each of its buckets) takes a sampled call's trace id
// as its new exemplar. Prometheus keeps one exemplar per counter series and
// per bucket, the last one given, and a scrape (every 15 s or so) shows
// that one: refreshing it on every sampled call cost a traced REST ping 35
// of its allocations (client_golang builds and checks a new dto.Exemplar,
// its labels and its timestamp on each) for exemplars no scrape would see.
// Once a second keeps what a scrape shows: a recent sampled call of that
// series, and of each bucket, so a slow call's bucket still links to its
// trace.
const exemplarEvery = time.Second

// method holds the grpc_server_* series of one served method, each looked
// up on its first use (so that a series shows when the vector would make
// it) and kept.
type method struct {
	service, name string
	// typ is the grpc_type label: unary, or server_stream for a
	// server-streaming method opened through the chain (ServerStreams).
	typ                     string
	started, received, sent lazy[prometheus.Counter]
	seconds                 lazy[prometheus.Observer]
	handled                 series
	// bucketExemplars are when each bucket of seconds (the +Inf one
	// last) last took an exemplar.
	bucketExemplars [len(handlingBucketsArray) + 1]exemplarClock
}

type callerKey struct{ method, caller string }

// series holds one counter per gRPC code.
type series [numCodes]lazy[prometheus.Counter]

// lazy is a metric of a vector, looked up on first use and kept, with
// when it last took an exemplar.
type lazy[M any] struct {
	p        atomic.Pointer[M]
	exemplar exemplarClock
}

// exemplarClock is when a series (or a bucket) last took an exemplar, as
// the time since Metrics.epoch plus one (0: never).
type exemplarClock struct{ at atomic.Int64 }

// due says whether a series whose clock is c takes an exemplar at now
// (the time since the epoch), and if it does, sets c to now: true the
// first time, then once exemplarEvery has passed. Of calls racing for the
// same slot one wins.
func (c *exemplarClock) due(now time.Duration) bool {
	last := c.at.Load()
	next := int64(now) + 1
	if last != 0 && next-last < int64(exemplarEvery) {
		return false
	}
	return c.at.CompareAndSwap(last, next)
}

// get returns the metric, looked up with lookup the first time. lookup does
// not escape, so a call that finds the metric allocates nothing.
func (l *lazy[M]) get(lookup func() M) M {
	if m := l.p.Load(); m != nil {
		return *m
	}
	m := lookup()
	l.p.Store(&m)
	return m
}

// New makes the collectors and registers them on reg. methods are the full
// names of the served methods, the only values of the method label.
func New(reg prometheus.Registerer, methods []string) (*Metrics, error) {
	grpcLabels := []string{"grpc_type", "grpc_service", "grpc_method"}
	m := &Metrics{
		started:  counterVec("grpc_server_started_total", "Total number of RPCs started on the server.", grpcLabels...),
		handled:  counterVec("grpc_server_handled_total", "Total number of RPCs completed on the server, regardless of success or failure.", append(grpcLabels, "grpc_code")...),
		received: counterVec("grpc_server_msg_received_total", "Total number of RPC stream messages received on the server.", grpcLabels...),
		sent:     counterVec("grpc_server_msg_sent_total", "Total number of gRPC stream messages sent by the server.", grpcLabels...),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "grpc_server_handling_seconds",
			Help:    "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
			Buckets: handlingBuckets,
		}, grpcLabels),
		requests: counterVec("sheba_requests_total",
			"Business requests by full gRPC method, gRPC code and calling API key id (REST calls counted under their gRPC method).",
			"method", "code", "api_key_id"),
		rejected: counterVec("sheba_rejected_total",
			"Requests rejected before their handler, by reason: unauthenticated, rate, key_rate, inflight.", "reason"),
		methods: make(map[string]*method, len(methods)),
		now:     time.Now,
	}
	m.epoch = m.now()
	for _, full := range methods {
		svc, name := splitMethod(full)
		m.methods[full] = &method{service: svc, name: name, typ: unary}
	}
	for _, r := range []string{ReasonUnauthenticated, ReasonRate, ReasonKeyRate, ReasonInflight} {
		m.rejected.WithLabelValues(r) // every reason shows, at 0
	}
	for _, c := range []prometheus.Collector{m.started, m.handled, m.received, m.sent, m.seconds, m.requests, m.rejected} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// splitMethod returns the service and method of a full method name, as the
// grpc_service and grpc_method labels have them.
func splitMethod(full string) (service, method string) {
	full = strings.TrimPrefix(full, "/")
	if i := strings.Index(full, "/"); i >= 0 {
		return full[:i], full[i+1:]
	}
	return "unknown", "unknown"
}

// InitializeServer makes the grpc_server_* series of every method of srv
// show at 0 before its first call.
func (m *Metrics) InitializeServer(srv *grpc.Server) {
	for svc, info := range srv.GetServiceInfo() {
		for _, mi := range info.Methods {
			typ := typeOf(mi)
			m.started.WithLabelValues(typ, svc, mi.Name)
			m.received.WithLabelValues(typ, svc, mi.Name)
			m.sent.WithLabelValues(typ, svc, mi.Name)
			m.seconds.WithLabelValues(typ, svc, mi.Name)
			for c := range numCodes {
				m.handled.WithLabelValues(typ, svc, mi.Name, codes.Code(c).String())
			}
		}
	}
}

func typeOf(mi grpc.MethodInfo) string {
	switch {
	case mi.IsClientStream && mi.IsServerStream:
		return "bidi_stream"
	case mi.IsClientStream:
		return "client_stream"
	case mi.IsServerStream:
		return "server_stream"
	}
	return unary
}

const unary = "unary"

// ServerStreams says the methods named (full names, among New's methods)
// are server-streaming: the chain opens each stream as a call that lasts
// as long as the stream (internal/app), and their grpc_server_* series
// have grpc_type "server_stream", as go-grpc-middleware's stream
// interceptor labels them. Call it before the first call.
func (m *Metrics) ServerStreams(full ...string) {
	for _, f := range full {
		if meth, ok := m.methods[f]; ok {
			meth.typ = "server_stream"
		}
	}
}

// MessageSent counts one message sent on a stream of method (a full name
// that ServerStreams named) in grpc_server_msg_sent_total, as
// go-grpc-middleware counts each message a stream sends: the interceptor
// sees the stream's opening and its end, not its messages.
func (m *Metrics) MessageSent(method string) {
	meth, ok := m.methods[method]
	if !ok {
		return
	}
	svc, name, typ := meth.service, meth.name, meth.typ
	meth.sent.get(func() prometheus.Counter { return m.sent.WithLabelValues(typ, svc, name) }).Inc()
}

// UnaryServerInterceptor feeds the grpc_server_* family, with the trace id
// as exemplar of its series when the call is sampled, and
// sheba_requests_total.
func (m *Metrics) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return m.intercept
}

// Refused counts a call of method (a full method name) refused with err
// before it reached the chain, where the interceptor would have counted it:
// the gRPC server's tap refuses a call without a valid key before grpc-go
// reads its message. It counts the call as the interceptor counts one that
// a link refuses at once (started, received, handled under err's code, a
// handling time, and sheba_requests_total under the caller of ctx, "none"
// before authentication), so that no series tells where a call was
// refused.
func (m *Metrics) Refused(ctx context.Context, method string, err error) {
	_, _ = m.intercept(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) {
		return nil, err
	})
}

func (m *Metrics) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := m.now()
	meth, served := m.methods[info.FullMethod]
	if !served {
		// A method outside the served set: its series are not kept.
		svc, name := splitMethod(info.FullMethod)
		meth = &method{service: svc, name: name, typ: unary}
	}
	ex := exemplar{sc: trace.SpanContextFromContext(ctx)}
	svc, name, typ := meth.service, meth.name, meth.typ
	since := start.Sub(m.epoch)
	add(&meth.started, since, &ex, func() prometheus.Counter { return m.started.WithLabelValues(typ, svc, name) })
	add(&meth.received, since, &ex, func() prometheus.Counter { return m.received.WithLabelValues(typ, svc, name) })

	resp, err := handler(ctx, req)

	end := m.now()
	since = end.Sub(m.epoch)
	// The grpc_server_* code reads context errors as grpc-go itself
	// does; sheba_requests_total has status.Code's.
	s, isStatus := status.FromError(err)
	if !isStatus {
		s = status.FromContextError(err)
	}
	code := s.Code()
	if err == nil && typ == unary {
		// A stream's messages are counted as they are sent
		// (MessageSent).
		add(&meth.sent, since, &ex, func() prometheus.Counter { return m.sent.WithLabelValues(typ, svc, name) })
	}
	var handled *lazy[prometheus.Counter]
	if int(code) < numCodes {
		handled = &meth.handled[code]
	} else {
		handled = new(lazy[prometheus.Counter]) // not a code of today's gRPC: not kept
	}
	add(handled, since, &ex, func() prometheus.Counter {
		return m.handled.WithLabelValues(typ, svc, name, code.String())
	})
	seconds := end.Sub(start).Seconds()
	observer := meth.seconds.get(func() prometheus.Observer { return m.seconds.WithLabelValues(typ, svc, name) })
	// The bucket the observation falls in: the first whose upper bound is
	// at least seconds, as the histogram counts it.
	if ex.sc.IsSampled() && meth.bucketExemplars[sort.SearchFloat64s(handlingBuckets, seconds)].due(since) {
		observer.(prometheus.ExemplarObserver).ObserveWithExemplar(seconds, ex.labels())
	} else {
		observer.Observe(seconds)
	}

	if !isStatus {
		code = codes.Unknown
	}
	m.request(ctx, info.FullMethod, served, code).Inc()
	return resp, err
}

// get returns the counter of code, looked up with lookup the first time.
func (s *series) get(code codes.Code, lookup func() prometheus.Counter) prometheus.Counter {
	if int(code) >= numCodes {
		return lookup() // not a code of today's gRPC: not kept
	}
	return s[code].get(lookup)
}

// request returns the sheba_requests_total series of the call.
func (m *Metrics) request(ctx context.Context, full string, served bool, code codes.Code) prometheus.Counter {
	if !served {
		full = "unknown"
	}
	caller := "none"
	if ci := callinfo.FromContext(ctx); ci != nil && ci.CallerID != "" {
		caller = ci.CallerID
	}
	k := callerKey{full, caller}
	var s *series
	if v, ok := m.callers.Load(k); ok {
		s = v.(*series)
	} else {
		// Label values are bounded (served methods, configured keys), so
		// the map is.
		v, _ := m.callers.LoadOrStore(k, new(series))
		s = v.(*series)
	}
	return s.get(code, func() prometheus.Counter { return m.requests.WithLabelValues(full, code.String(), caller) })
}

// add adds one to the counter of l (looked up with lookup the first time),
// with ex as its exemplar when the call is sampled and the series is due
// one at now (the time since the epoch).
func add(l *lazy[prometheus.Counter], now time.Duration, ex *exemplar, lookup func() prometheus.Counter) {
	c := l.get(lookup)
	if ex.sc.IsSampled() && l.exemplar.due(now) {
		c.(prometheus.ExemplarAdder).AddWithExemplar(1, ex.labels())
		return
	}
	c.Inc()
}

// exemplar is the exemplar of a call: the trace id of its span when the
// span is sampled.
type exemplar struct {
	sc trace.SpanContext
	l  prometheus.Labels
}

// labels returns the exemplar's labels, made on first use: most calls,
// sampled or not, take no exemplar.
func (e *exemplar) labels() prometheus.Labels {
	if e.l == nil {
		e.l = prometheus.Labels{"trace_id": e.sc.TraceID().String()}
	}
	return e.l
}

// Rejected returns a function that counts a rejection for reason, for the
// WithOnReject options of the rejecting interceptors.
func (m *Metrics) Rejected(reason string) func(context.Context) {
	c := m.rejected.WithLabelValues(reason)
	return func(context.Context) { c.Inc() }
}
