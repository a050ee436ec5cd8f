package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/codec/cborpb"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// TestErrorBodies checks that a cached error body is the body the marshaler
// makes, per status and per media type, and that other messages are not
// cached.
func TestErrorBodies(t *testing.T) {
	bodies, err := newErrorBodiesCache()
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

// TestErrorBodiesHoldNoRequestText answers errors through the error
// handler: only those free of request text and small are cached, so the
// cache cannot grow with what callers send.
func TestErrorBodiesHoldNoRequestText(t *testing.T) {
	bodies, err := newErrorBodiesCache()
	if err != nil {
		t.Fatal(err)
	}
	m := markingMarshaler{newErrorBodies(&runtime.JSONPb{}, bodies)}
	mux := runtime.NewServeMux()
	answer := func(err error) {
		r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/accounts", http.NoBody)
		rec := httptest.NewRecorder()
		errorHandler(r.Context(), mux, m, rec, r, err)
		if size := rec.Body.Len(); size > 4<<10 {
			t.Errorf("%v: answer of %d bytes, want at most 4 KiB", err, size)
		}
	}
	long := strings.Repeat("a", 100_000)
	for i := range 100 {
		name := fmt.Sprintf("f%d", i)
		// What a decoder or grpc-gateway says, short or long.
		answer(status.Errorf(codes.InvalidArgument, "proto: unknown field %q", name))
		answer(status.Errorf(codes.InvalidArgument, "proto: unknown field %q", name+long))
		// The gateway's own errors that quote the request.
		answer(&runtime.HTTPStatusError{HTTPStatus: http.StatusUnsupportedMediaType,
			Err: reason.Error(codes.InvalidArgument, reason.UnsupportedMediaType, "unsupported content type "+reason.Quote(name))})
		answer(reason.Error(codes.InvalidArgument, reason.MalformedBody, "invalid gzip request body: "+name))
		// A large body of sheba's own.
		answer(reason.Error(codes.NotFound, reason.NotFound, name+strings.Repeat("x", maxCachedErrorBody)))
	}
	if n := bodies.Len(); n != 0 {
		t.Errorf("cached %d bodies of errors that quote the request or are large, want none", n)
	}
	for range 3 {
		answer(reason.Error(codes.InvalidArgument, reason.InvalidArgument, "invalid username"))
		answer(reason.Error(codes.Unauthenticated, reason.APIKeyMissing, "missing API key"))
	}
	if n := bodies.Len(); n != 2 {
		t.Errorf("cached %d bodies of two fixed errors, want 2", n)
	}
}

// TestErrorBodiesCollision puts another status's body under the hash of a
// status, as a collision would: the status is answered its own body.
func TestErrorBodiesCollision(t *testing.T) {
	bodies, err := newErrorBodiesCache()
	if err != nil {
		t.Fatal(err)
	}
	plain := &runtime.JSONPb{}
	json := newErrorBodies(plain, bodies)
	mine := reason.Error(codes.NotFound, reason.NotFound, "account 1 not found").(*reason.StatusError).Proto()
	other := reason.Error(codes.NotFound, reason.NotFound, "account 2 not found").(*reason.StatusError).Proto()
	otherBody, err := plain.Marshal(other)
	if err != nil {
		t.Fatal(err)
	}
	bodies.Add(statusHash(json.ContentType(mine), mine), errorBody{st: other, contentType: json.ContentType(mine), body: otherBody})
	got, err := json.Marshal(mine)
	if err != nil {
		t.Fatal(err)
	}
	want, err := plain.Marshal(mine)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("got %s, want %s", got, want)
	}
}
