package e2e

import (
	"io"
	"net/http"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// TestStreamEventsOpening: EventService exists on every listener. Server
// reflection lists it; over gRPC a call with a key streams
// (eventstream_test.go) and one without is UNAUTHENTICATED; over REST, GET
// /v1/events:stream with a key and a cursor never issued is 400
// EVENT_CURSOR_EXPIRED with the error body (the handler's refusal before
// the first line; REST streams: eventsrest_test.go), without a key 401
// (the key is checked first), and with a key and a bad event type 400 (its
// opening is validated, as a unary call's request).
func TestStreamEventsOpening(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, func(c *config.Config) { c.GRPC.Reflection = true })

	t.Run("reflection", func(t *testing.T) {
		s, err := rpb.NewServerReflectionClient(e.conn).ServerReflectionInfo(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		resp, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, svc := range resp.GetListServicesResponse().GetService() {
			names = append(names, svc.GetName())
		}
		if !slices.Contains(names, shebav1.EventService_Table.Name) {
			t.Errorf("reflection lists %q, want %s among them", names, shebav1.EventService_Table.Name)
		}
	})

	t.Run("gRPC", func(t *testing.T) {
		for _, c := range []struct {
			name   string
			md     []string
			code   codes.Code
			reason string
		}{
			// (With a key it streams: eventstream_test.go.)
			{"without a key", nil, codes.Unauthenticated, reason.APIKeyMissing},
		} {
			var header metadata.MD
			ctx := metadata.AppendToOutgoingContext(t.Context(), c.md...)
			stream, err := shebav1.NewEventServiceClient(e.anon).StreamEvents(ctx, &shebav1.StreamEventsRequest{}, grpc.Header(&header))
			if err == nil {
				_, err = stream.Recv()
			}
			wantGRPCDetails(t, "StreamEvents "+c.name, err, header, c.code, c.reason)
		}
	})

	t.Run("REST", func(t *testing.T) {
		r := e.do(t, http.MethodGet, "/v1/events:stream?eventTypes=account.created&afterEventId=abc", "")
		wantRESTDetails(t, "GET /v1/events:stream with a key", r, http.StatusBadRequest, "EVENT_CURSOR_EXPIRED")

		r = e.do(t, http.MethodGet, "/v1/events:stream", "", "X-Api-Key", "", "X-Request-Id", "stream-refused")
		wantRESTDetails(t, "GET /v1/events:stream without a key", r, http.StatusUnauthorized, reason.APIKeyMissing)
		// The chain's response headers, as on a unary call's error.
		if got := r.Header.Get("X-Request-Id"); got != "stream-refused" {
			t.Errorf("GET /v1/events:stream without a key: X-Request-Id %q, want the request's", got)
		}

		r = e.do(t, http.MethodGet, "/v1/events:stream?eventTypes=account.deleted", "")
		wantRESTError(t, r, http.StatusBadRequest, codes.InvalidArgument, "event_types[0]")
	})
}
