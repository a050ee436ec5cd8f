package gateway

import (
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	lru "github.com/hashicorp/golang-lru/v2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"

	"github.com/shebasvc/sheba/codec/cborpb"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// TestErrorBodies checks that a cached error body is the body the marshaler
// makes, per status and per media type, and that other messages are not
// cached.
func TestErrorBodies(t *testing.T) {
	bodies, err := lru.New[string, []byte](errorBodiesSize)
	if err != nil {
		t.Fatal(err)
	}
	plainJSON := &runtime.JSONPb{}
	plainCBOR := &cborpb.Marshaler{}
	json, cbor := newErrorBodies(plainJSON, bodies), newErrorBodies(plainCBOR, bodies)

	badName := reason.Status(codes.InvalidArgument, reason.InvalidArgument, "invalid username",
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "username", Description: "too short"}}}).Proto()
	badPassword := reason.Status(codes.InvalidArgument, reason.InvalidArgument, "invalid password",
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "password", Description: "too short"}}}).Proto()
	missing := reason.Status(codes.NotFound, reason.NotFound, "account 1 not found").Proto()

	for round := range 2 {
		for _, test := range []struct {
			name   string
			cached errorBodies
			plain  runtime.Marshaler
			msg    any
		}{
			{"json bad name", json, plainJSON, badName},
			{"json bad password", json, plainJSON, badPassword},
			{"json missing", json, plainJSON, missing},
			{"cbor bad name", cbor, plainCBOR, badName},
			{"json success message", json, plainJSON, &shebav1.PingResponse{Message: "pong"}},
		} {
			got, err := test.cached.Marshal(test.msg)
			if err != nil {
				t.Fatalf("round %d, %s: %v", round, test.name, err)
			}
			want, err := test.plain.Marshal(test.msg)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("round %d, %s: got %q, want %q", round, test.name, got, want)
			}
		}
	}
	if got, want := bodies.Len(), 4; got != want {
		t.Errorf("cached bodies: got %d, want %d (three JSON statuses and one CBOR)", got, want)
	}
}
