package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/callinfo"
	"github.com/shebasvc/sheba/interceptors/interceptortest"
	"github.com/shebasvc/sheba/interceptors/metrics"
)

const ping = "/sheba.v1.PingService/Ping"

func TestRequestsAndRejections(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, []string{ping})
	if err != nil {
		t.Fatal(err)
	}
	i := m.UnaryServerInterceptor()
	call := func(method, caller string, err error) {
		ctx := callinfo.NewContext(t.Context(), &callinfo.Info{CallerID: caller})
		_, _ = i(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) { return nil, err })
	}
	call(ping, "billing", nil)
	call(ping, "billing", nil)
	call(ping, "", status.Error(codes.Unauthenticated, "x"))
	call("/evil.Service/Probe", "billing", nil) // not a served method
	m.Rejected(metrics.ReasonInflight)(t.Context())

	want := `
# HELP sheba_requests_total Business requests by full gRPC method, gRPC code and calling API key id (REST calls counted under their gRPC method).
# TYPE sheba_requests_total counter
sheba_requests_total{api_key_id="billing",code="OK",method="/sheba.v1.PingService/Ping"} 2
sheba_requests_total{api_key_id="billing",code="OK",method="unknown"} 1
sheba_requests_total{api_key_id="none",code="Unauthenticated",method="/sheba.v1.PingService/Ping"} 1
# HELP sheba_rejected_total Requests rejected before their handler, by reason: unauthenticated, rate, key_rate, inflight.
# TYPE sheba_rejected_total counter
sheba_rejected_total{reason="inflight"} 1
sheba_rejected_total{reason="key_rate"} 0
sheba_rejected_total{reason="rate"} 0
sheba_rejected_total{reason="unauthenticated"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sheba_requests_total", "sheba_rejected_total"); err != nil {
		t.Error(err)
	}
}

// TestServer counts a real server's calls in the grpc_server_* family.
func TestServer(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, []string{ping})
	if err != nil {
		t.Fatal(err)
	}
	client := interceptortest.Serve(t, m.UnaryServerInterceptor(), interceptortest.Pong)
	for range 3 {
		if _, err := client.Ping(t.Context(), &shebav1.PingRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	want := `
# HELP grpc_server_handled_total Total number of RPCs completed on the server, regardless of success or failure.
# TYPE grpc_server_handled_total counter
grpc_server_handled_total{grpc_code="OK",grpc_method="Ping",grpc_service="sheba.v1.PingService",grpc_type="unary"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "grpc_server_handled_total"); err != nil {
		t.Error(err)
	}
}

// ignoreTimings compares gathered families but for what timing sets: the
// histograms' sums, their buckets' counts, and when each series was made.
var ignoreTimings = []cmp.Option{
	protocmp.Transform(),
	protocmp.IgnoreFields(&dto.Histogram{}, "sample_sum", "created_timestamp"),
	protocmp.IgnoreFields(&dto.Bucket{}, "cumulative_count", "cumulative_count_float"),
	protocmp.IgnoreFields(&dto.Counter{}, "created_timestamp"),
}

// TestSameAsProvider holds the grpc_server_* family side by side with
// go-grpc-middleware's prometheus provider, which it replaces: the same
// series, values and exemplars after the same calls.
func TestSameAsProvider(t *testing.T) {
	srv := grpc.NewServer()
	shebav1.RegisterPingServiceServer(srv, shebav1.UnimplementedPingServiceServer{})
	healthpb.RegisterHealthServer(srv, health.NewServer()) // a stream method too

	ours, theirs := prometheus.NewRegistry(), prometheus.NewRegistry()
	m, err := metrics.New(ours, []string{ping})
	if err != nil {
		t.Fatal(err)
	}
	m.InitializeServer(srv)
	provider := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramBuckets(metrics.HandlingBuckets)))
	theirs.MustRegister(provider)
	provider.InitializeMetrics(srv)
	exemplar := func(ctx context.Context) prometheus.Labels {
		if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
			return prometheus.Labels{"trace_id": sc.TraceID().String()}
		}
		return nil
	}

	sampled := trace.ContextWithSpanContext(t.Context(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled,
	}))
	for _, i := range []grpc.UnaryServerInterceptor{m.UnaryServerInterceptor(), provider.UnaryServerInterceptor(grpcprom.WithExemplarFromContext(exemplar))} {
		for _, c := range []struct {
			ctx    context.Context
			method string
			err    error
		}{
			{t.Context(), ping, nil},
			{t.Context(), ping, nil},
			{sampled, ping, nil},
			{t.Context(), ping, status.Error(codes.NotFound, "x")},
			{sampled, ping, status.Error(codes.Internal, "x")},
			{t.Context(), ping, context.DeadlineExceeded},
			{t.Context(), ping, fmt.Errorf("wrapped: %w", context.Canceled)},
			{t.Context(), ping, errors.New("plain")},
			{t.Context(), ping, status.Error(codes.Code(40), "not a code")},
			{t.Context(), "/evil.Service/Probe", nil},
			{t.Context(), "no-slash", status.Error(codes.NotFound, "x")},
		} {
			_, _ = i(c.ctx, nil, &grpc.UnaryServerInfo{FullMethod: c.method}, func(context.Context, any) (any, error) { return nil, c.err })
		}
	}

	gather := func(reg *prometheus.Registry) []*dto.MetricFamily {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var grpcFamilies []*dto.MetricFamily
		for _, f := range families {
			if strings.HasPrefix(f.GetName(), "grpc_server_") {
				grpcFamilies = append(grpcFamilies, f)
			}
		}
		return grpcFamilies
	}
	want, got := gather(theirs), gather(ours)
	if len(want) != 5 {
		t.Fatalf("the provider made %d grpc_server_* families, want 5", len(want))
	}
	// Timings differ between the two runs: the histograms' sums, their
	// buckets' counts and exemplar values, and when each series and
	// exemplar was made. The exemplars' labels are compared, each
	// histogram's together: which bucket holds one depends on how long its
	// call took, which on a loaded machine may differ between the runs.
	wantExemplars, gotExemplars := liftExemplars(want), liftExemplars(got)
	if len(wantExemplars) == 0 {
		t.Error("the provider's histograms hold no exemplar: the sampled calls left none")
	}
	if diff := cmp.Diff(want, got, append(ignoreTimings, protocmp.IgnoreFields(&dto.Exemplar{}, "timestamp", "value"))...); diff != "" {
		t.Errorf("grpc_server_* (-provider +ours):\n%s", diff)
	}
	if diff := cmp.Diff(wantExemplars, gotExemplars); diff != "" {
		t.Errorf("grpc_server_* exemplars (-provider +ours):\n%s", diff)
	}
}

// liftExemplars takes the exemplars out of the histograms' buckets of
// families and returns their distinct labels, sorted, by family and
// series.
func liftExemplars(families []*dto.MetricFamily) map[string][]string {
	lifted := map[string][]string{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			h := m.GetHistogram()
			if h == nil {
				continue
			}
			series := f.GetName() + prototext.Format(&dto.Metric{Label: m.GetLabel()})
			for _, b := range h.GetBucket() {
				if e := b.GetExemplar(); e != nil {
					lifted[series] = append(lifted[series], prototext.Format(&dto.Exemplar{Label: e.GetLabel()}))
					b.Exemplar = nil
				}
			}
			// Two calls may share a bucket, one exemplar kept, in one run
			// and not in the other: the labels are compared, not how many.
			slices.Sort(lifted[series])
			lifted[series] = slices.Compact(lifted[series])
		}
	}
	return lifted
}

// TestRefused: a call that the gRPC server's tap refuses before the chain
// is counted as the interceptor counts a call that a link of the chain
// refuses at once: the same series and values in every family.
func TestRefused(t *testing.T) {
	const keyed = "/sheba.v1.AccountService/GetAccount"
	refusal := status.Error(codes.Unauthenticated, "missing API key")
	inChain, inTap := prometheus.NewRegistry(), prometheus.NewRegistry()
	chain, err := metrics.New(inChain, []string{ping, keyed})
	if err != nil {
		t.Fatal(err)
	}
	tap, err := metrics.New(inTap, []string{ping, keyed})
	if err != nil {
		t.Fatal(err)
	}
	for _, method := range []string{keyed, keyed, ping, "/evil.Service/Probe"} {
		_, _ = chain.UnaryServerInterceptor()(t.Context(), nil, &grpc.UnaryServerInfo{FullMethod: method},
			func(context.Context, any) (any, error) { return nil, refusal })
		tap.Refused(t.Context(), method, refusal)
	}
	want, err := inChain.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got, err := inTap.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// No grpc_server_msg_sent_total: nothing was sent.
	if len(got) != 6 {
		t.Errorf("%d families, want 6", len(got))
	}
	if diff := cmp.Diff(want, got, ignoreTimings...); diff != "" {
		t.Errorf("refused by the tap (-refused in the chain +refused by the tap):\n%s", diff)
	}
	wantRequests := `
# HELP sheba_requests_total Business requests by full gRPC method, gRPC code and calling API key id (REST calls counted under their gRPC method).
# TYPE sheba_requests_total counter
sheba_requests_total{api_key_id="none",code="Unauthenticated",method="/sheba.v1.AccountService/GetAccount"} 2
sheba_requests_total{api_key_id="none",code="Unauthenticated",method="/sheba.v1.PingService/Ping"} 1
sheba_requests_total{api_key_id="none",code="Unauthenticated",method="unknown"} 1
`
	if err := testutil.GatherAndCompare(inTap, strings.NewReader(wantRequests), "sheba_requests_total"); err != nil {
		t.Error(err)
	}
}

// TestExemplarRefresh: a series takes a sampled call's trace id as its
// exemplar the first time, then at most once every ExemplarEvery, and each
// bucket of the histogram on its own, so a slower call's bucket links to
// its trace even within the second.
func TestExemplarRefresh(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, []string{ping})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	metrics.SetClock(m, func() time.Time { return now })
	call := func(id byte, took time.Duration) {
		t.Helper()
		ctx := trace.ContextWithSpanContext(t.Context(), trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{id}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled,
		}))
		_, err := m.UnaryServerInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: ping}, func(context.Context, any) (any, error) {
			now = now.Add(took)
			return nil, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// exemplars reads the trace id of the exemplar of each counter
	// family's Ping series, and of each histogram bucket that has one
	// (by upper bound).
	exemplars := func() map[string]string {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		id := func(e *dto.Exemplar) string {
			for _, l := range e.GetLabel() {
				if l.GetName() == "trace_id" {
					return l.GetValue()[:2]
				}
			}
			return "?"
		}
		for _, f := range families {
			for _, s := range f.GetMetric() {
				if e := s.GetCounter().GetExemplar(); e != nil {
					got[f.GetName()] = id(e)
				}
				for _, b := range s.GetHistogram().GetBucket() {
					if e := b.GetExemplar(); e != nil {
						got[fmt.Sprintf("le=%g", b.GetUpperBound())] = id(e)
					}
				}
			}
		}
		return got
	}
	counters := []string{"grpc_server_started_total", "grpc_server_msg_received_total", "grpc_server_msg_sent_total", "grpc_server_handled_total"}
	want := func(trace string, buckets map[string]string) map[string]string {
		w := maps.Clone(buckets)
		for _, c := range counters {
			w[c] = trace
		}
		return w
	}

	call(0x0a, 50*time.Microsecond) // bucket 0.0001
	if diff := cmp.Diff(want("0a", map[string]string{"le=0.0001": "0a"}), exemplars()); diff != "" {
		t.Errorf("after the first sampled call (-want +got):\n%s", diff)
	}
	// Within the second: the series keep the first call's exemplar; a
	// bucket that has none takes the call's.
	call(0x0b, 50*time.Microsecond)
	call(0x0c, 3*time.Millisecond) // bucket 0.005
	if diff := cmp.Diff(want("0a", map[string]string{"le=0.0001": "0a", "le=0.005": "0c"}), exemplars()); diff != "" {
		t.Errorf("within %v of the first (-want +got):\n%s", metrics.ExemplarEvery, diff)
	}
	// A call not sampled takes none.
	now = now.Add(metrics.ExemplarEvery)
	_, _ = m.UnaryServerInterceptor()(t.Context(), nil, &grpc.UnaryServerInfo{FullMethod: ping}, func(context.Context, any) (any, error) { return nil, nil })
	if diff := cmp.Diff(want("0a", map[string]string{"le=0.0001": "0a", "le=0.005": "0c"}), exemplars()); diff != "" {
		t.Errorf("after a call not sampled (-want +got):\n%s", diff)
	}
	// A second on, the next sampled call refreshes its series and bucket.
	call(0x0d, 50*time.Microsecond)
	if diff := cmp.Diff(want("0d", map[string]string{"le=0.0001": "0d", "le=0.005": "0c"}), exemplars()); diff != "" {
		t.Errorf("%v later (-want +got):\n%s", metrics.ExemplarEvery, diff)
	}
}
