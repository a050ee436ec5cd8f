package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// The REST gateway's own rules (routing errors, 415, the body limit, the
// operator endpoints) are tested in server/gateway; here is what the
// assembly adds to them.

// TestBodyLimit: gRPC messages over grpc.max_recv_bytes are
// RESOURCE_EXHAUSTED BODY_TOO_LARGE, as REST bodies over
// http.max_body_bytes are 413 (TestGatewayErrorDetails), and change nothing.
func TestBodyLimit(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, func(c *config.Config) { c.GRPC.MaxRecvBytes = 1024 })
	_, err := e.account.CreateAccount(t.Context(), &shebav1.CreateAccountRequest{Username: "judy", Password: strings.Repeat("p", 2000)})
	wantGRPCError(t, err, codes.ResourceExhausted, "")
	if got := reasonOf(status.Convert(err)); got != reason.BodyTooLarge {
		t.Errorf("reason %q, want %s", got, reason.BodyTooLarge)
	}

	n := e.count(t, `SELECT count(*) FROM accounts`)
	if n != 0 {
		t.Errorf("got %d accounts after oversized bodies, want 0", n)
	}
}

// TestOperatorEndpoints: the service is ready on both transports once the
// first database ping has answered.
func TestOperatorEndpoints(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)

	deadline := time.Now().Add(10 * time.Second)
	var r restResponse
	for {
		r = e.do(t, http.MethodGet, "/readyz", "")
		if r.Code == http.StatusOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	wantCode(t, r, http.StatusOK)
	if diff := cmp.Diff(map[string]any{"status": "ok"}, r.JSON(t)); diff != "" {
		t.Errorf("GET /readyz body (-want +got):\n%s", diff)
	}
	// The server, and every service of the method table.
	services := []string{""}
	for _, svc := range shebav1.Services {
		services = append(services, svc.Name)
	}
	for _, svc := range services {
		resp, err := e.health.Check(t.Context(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("health Check(%q): %v", svc, err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health Check(%q): got %v, want SERVING", svc, resp.GetStatus())
		}
	}
}
