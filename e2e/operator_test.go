package e2e

import (
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/e2e/resttest"
)

// TestOperatorPort: with operator.addr set, /livez, /readyz and /metrics
// answer there in plaintext and no longer on http.addr, and gRPC health
// answers there over h2c (the kubelet's grpc probe) as on grpc.addr.
func TestOperatorPort(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, func(c *config.Config) { c.Operator.Addr = "127.0.0.1:0" })
	op := resttest.Client{BaseURL: "http://" + e.operatorAddr}
	waitFor(t, 10*time.Second, "readiness on the operator port", func() bool {
		return op.Do(t, http.MethodGet, "/readyz", "").Code == http.StatusOK
	})
	for path, want := range map[string]int{"/livez": http.StatusNoContent, "/readyz": http.StatusOK, "/metrics": http.StatusOK} {
		if r := op.Do(t, http.MethodGet, path, ""); r.Code != want {
			t.Errorf("operator port GET %s: got %d, want %d", path, r.Code, want)
		}
		if r := e.do(t, http.MethodGet, path, ""); r.Code != http.StatusNotFound {
			t.Errorf("http.addr GET %s: got %d, want 404: it is on the operator port", path, r.Code)
		}
	}
	if r := op.Do(t, http.MethodGet, "/v1/ping", ""); r.Code != http.StatusNotFound {
		t.Errorf("operator port GET /v1/ping: got %d, want 404: the API is not there", r.Code)
	}
	wantCode(t, e.do(t, http.MethodGet, "/v1/ping", ""), http.StatusOK)
	wantCode(t, e.do(t, http.MethodGet, "/openapi.json", ""), http.StatusOK)

	conn, err := grpc.NewClient(e.operatorAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for name, client := range map[string]healthpb.HealthClient{"operator port": healthpb.NewHealthClient(conn), "grpc.addr": e.health} {
		resp, err := client.Check(t.Context(), &healthpb.HealthCheckRequest{})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("%s: health got %v %v, want SERVING", name, resp.GetStatus(), err)
		}
	}
}
