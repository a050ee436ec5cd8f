package metrics_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/interceptors/metrics"
)

// The collectors go to the caller's registry; the interceptor counts every
// outcome under the method and its gRPC code.
func Example() {
	reg := prometheus.NewRegistry()
	const method = "/sheba.v1.AccountService/GetAccount"
	m, err := metrics.New(reg, []string{method})
	if err != nil {
		panic(err)
	}
	interceptor := m.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: method}
	_, _ = interceptor(context.Background(), nil, info, func(context.Context, any) (any, error) {
		return nil, status.Error(codes.NotFound, "account not found")
	})
	families, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		if f.GetName() != "sheba_requests_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			fmt.Println(strings.Join(labels, " "), s.GetCounter().GetValue())
		}
	}
	// Output: api_key_id=none code=NotFound method=/sheba.v1.AccountService/GetAccount 1
}
