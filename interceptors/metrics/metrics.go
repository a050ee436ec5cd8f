package metrics

import (
	"context"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
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
var handlingBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
}

// Metrics holds the collectors. It is safe for concurrent use.
type Metrics struct {
	grpc     *grpcprom.ServerMetrics
	requests *prometheus.CounterVec
	rejected *prometheus.CounterVec
	methods  map[string]bool
}

// New makes the collectors and registers them on reg. methods are the full
// names of the served methods, the only values of the method label.
func New(reg prometheus.Registerer, methods []string) (*Metrics, error) {
	m := &Metrics{
		grpc: grpcprom.NewServerMetrics(
			grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramBuckets(handlingBuckets)),
		),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sheba_requests_total",
			Help: "Business requests by full gRPC method, gRPC code and calling API key id (REST calls counted under their gRPC method).",
		}, []string{"method", "code", "api_key_id"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sheba_rejected_total",
			Help: "Requests rejected before their handler, by reason: unauthenticated, rate, key_rate, inflight.",
		}, []string{"reason"}),
		methods: make(map[string]bool, len(methods)),
	}
	for _, meth := range methods {
		m.methods[meth] = true
	}
	for _, r := range []string{ReasonUnauthenticated, ReasonRate, ReasonKeyRate, ReasonInflight} {
		m.rejected.WithLabelValues(r) // every reason shows, at 0
	}
	for _, c := range []prometheus.Collector{m.grpc, m.requests, m.rejected} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// InitializeServer makes the grpc_server_* series of every method of srv
// show at 0 before its first call.
func (m *Metrics) InitializeServer(srv *grpc.Server) {
	m.grpc.InitializeMetrics(srv)
}

// GRPCUnaryServerInterceptor feeds the grpc_server_* family, with the trace
// id as exemplar of the handling-time histogram when the call is sampled.
func (m *Metrics) GRPCUnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return m.grpc.UnaryServerInterceptor(grpcprom.WithExemplarFromContext(exemplar))
}

func exemplar(ctx context.Context) prometheus.Labels {
	if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
		return prometheus.Labels{"trace_id": sc.TraceID().String()}
	}
	return nil
}

// UnaryServerInterceptor feeds sheba_requests_total.
func (m *Metrics) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		method := info.FullMethod
		if !m.methods[method] {
			method = "unknown"
		}
		caller := "none"
		if ci := callinfo.FromContext(ctx); ci != nil && ci.CallerID != "" {
			caller = ci.CallerID
		}
		m.requests.WithLabelValues(method, status.Code(err).String(), caller).Inc()
		return resp, err
	}
}

// Rejected returns a function that counts a rejection for reason, for the
// WithOnReject options of the rejecting interceptors.
func (m *Metrics) Rejected(reason string) func(context.Context) {
	c := m.rejected.WithLabelValues(reason)
	return func(context.Context) { c.Inc() }
}
