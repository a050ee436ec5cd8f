package metrics_test

import (
	"context"
	"strings"
	"testing"

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
	client := interceptortest.Serve(t, m.GRPCUnaryServerInterceptor(), interceptortest.Pong)
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
