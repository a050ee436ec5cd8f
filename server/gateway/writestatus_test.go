package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/shebasvc/sheba/codec/cborpb"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// TestWriteStatus answers errors by writeStatus and by
// runtime.DefaultHTTPErrorHandler, which it stands for on the gateway's
// mux: the status, headers and body are the same.
func TestWriteStatus(t *testing.T) {
	mux := runtime.NewServeMux(runtime.WithOutgoingHeaderMatcher(outgoingHeader))
	invalid := reason.Error(codes.InvalidArgument, reason.InvalidArgument, "invalid username: too short",
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "username", Description: "too short"}}}).(*reason.StatusError)
	header := runtime.NewServerMetadataContext(t.Context(), runtime.ServerMetadata{HeaderMD: metadata.Pairs(
		"x-request-id", "r1", "ratelimit", `"key";r=9;t=1`, "ratelimit-policy", `"key";q=10;w=1`, "custom", "a", "custom", "b")})
	for _, test := range []struct {
		name       string
		ctx        context.Context
		m          runtime.Marshaler
		err        *reason.StatusError
		httpStatus int
		te         string
	}{
		{"json", header, &runtime.JSONPb{}, invalid, http.StatusBadRequest, ""},
		{"cbor", header, &cborpb.Marshaler{}, invalid, http.StatusBadRequest, ""},
		{"no metadata", t.Context(), &runtime.JSONPb{}, invalid, http.StatusBadRequest, ""},
		{"unauthenticated", header, &runtime.JSONPb{}, reason.Error(codes.Unauthenticated, reason.APIKeyMissing, "missing API key").(*reason.StatusError), http.StatusUnauthorized, ""},
		{"status of its own", header, &runtime.JSONPb{}, reason.ErrorFor(codes.PermissionDenied, reason.HookDenied, "no", map[string]string{"reason": "x"}, http.StatusTeapot).(*reason.StatusError), http.StatusTeapot, ""},
		{"completed", header, &runtime.JSONPb{}, reason.CompleteError(errRouteNotFound.Err, "", 0), http.StatusNotFound, ""},
		{"trailers", header, &runtime.JSONPb{}, invalid, http.StatusBadRequest, "trailers"},
	} {
		answer := func(write func(w http.ResponseWriter, r *http.Request)) *httptest.ResponseRecorder {
			r := httptest.NewRequestWithContext(test.ctx, http.MethodPost, "/v1/accounts", http.NoBody)
			if test.te != "" {
				r.Header.Set("TE", test.te)
			}
			w := httptest.NewRecorder()
			// What the steps before set, which the answer drops.
			w.Header().Set("Trailer", "X")
			w.Header().Set("Transfer-Encoding", "chunked")
			write(w, r)
			return w
		}
		got := answer(func(w http.ResponseWriter, r *http.Request) {
			writeStatus(test.ctx, mux, test.m, w, r, test.httpStatus, test.err)
		})
		want := answer(func(w http.ResponseWriter, r *http.Request) {
			runtime.DefaultHTTPErrorHandler(test.ctx, mux, test.m, w, r, &runtime.HTTPStatusError{HTTPStatus: test.httpStatus, Err: test.err})
		})
		if got.Code != want.Code {
			t.Errorf("%s: got status %d, want %d", test.name, got.Code, want.Code)
		}
		if diff := cmp.Diff(want.Header(), got.Header()); diff != "" {
			t.Errorf("%s: headers (-want +got):\n%s", test.name, diff)
		}
		if got, want := got.Body.String(), want.Body.String(); got != want {
			t.Errorf("%s: body\ngot  %q\nwant %q", test.name, got, want)
		}
	}
}
