package cborpb_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/shebasvc/sheba/codec/cborpb"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

type accounts struct {
	shebav1.UnimplementedAccountServiceServer
}

func (accounts) CreateAccount(_ context.Context, req *shebav1.CreateAccountRequest) (*shebav1.CreateAccountResponse, error) {
	if req.GetUsername() == "BAD" {
		st, _ := status.New(codes.InvalidArgument, "invalid username").WithDetails(&errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "username", Description: "3-64 of a-z 0-9 . _ -"}},
		})
		return nil, st.Err()
	}
	return &shebav1.CreateAccountResponse{Account: &shebav1.Account{
		Id:         "0194ff00-0000-7000-8000-000000000001",
		Username:   req.GetUsername(),
		CreateTime: timestamppb.New(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)),
	}}, nil
}

// gatewayServer is a grpc-gateway mux set up as server/gateway.go sets it
// up, plus the CBOR marshaler.
func gatewayServer(t *testing.T) *httptest.Server {
	t.Helper()
	mux := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.JSONPb{
			MarshalOptions: protojson.MarshalOptions{EmitDefaultValues: true},
		}),
		runtime.WithMarshalerOption(cborpb.MediaType, &cborpb.Marshaler{}),
	)
	if err := shebav1.RegisterAccountServiceHandlerServer(t.Context(), mux, accounts{}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestThroughGateway(t *testing.T) {
	srv := gatewayServer(t)
	for _, tc := range []struct {
		name       string
		body       []byte
		wantStatus int
		check      func(t *testing.T, doc map[string]any)
	}{
		{
			name:       "created",
			body:       enc(t, map[string]any{"username": "ada", "password": "correct horse"}),
			wantStatus: http.StatusOK,
			check: func(t *testing.T, doc map[string]any) {
				if doc["username"] != "ada" {
					t.Errorf("username: got %v", doc["username"])
				}
				if ct, ok := doc["createTime"].(time.Time); !ok || !ct.Equal(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)) {
					t.Errorf("createTime: got %#v, want a tag-0 time", doc["createTime"])
				}
			},
		},
		{
			name:       "invalid argument with details",
			body:       enc(t, map[string]any{"username": "BAD", "password": "x"}),
			wantStatus: http.StatusBadRequest,
			check: func(t *testing.T, doc map[string]any) {
				if doc["code"] != uint64(codes.InvalidArgument) {
					t.Errorf("code: got %#v", doc["code"])
				}
				details, _ := doc["details"].([]any)
				if len(details) != 1 {
					t.Fatalf("details: got %#v", doc["details"])
				}
				d, _ := details[0].(map[string]any)
				if d["@type"] != "type.googleapis.com/google.rpc.BadRequest" {
					t.Errorf("@type: got %#v", d["@type"])
				}
				if fv, _ := d["fieldViolations"].([]any); len(fv) != 1 {
					t.Errorf("fieldViolations: got %#v", d["fieldViolations"])
				}
			},
		},
		{
			name:       "truncated body",
			body:       enc(t, map[string]any{"username": "ada"})[:8],
			wantStatus: http.StatusBadRequest,
		},
		{
			name:       "unknown field",
			body:       enc(t, map[string]any{"username": "ada", "admin": true}),
			wantStatus: http.StatusBadRequest,
		},
		{
			name:       "wrong type",
			body:       enc(t, map[string]any{"username": 7}),
			wantStatus: http.StatusBadRequest,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/accounts", bytes.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/cbor")
			req.Header.Set("Accept", "application/cbor")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status: got %d, want %d (%s)", resp.StatusCode, tc.wantStatus, diagnose(raw))
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/cbor" {
				t.Errorf("Content-Type: got %q", ct)
			}
			var doc map[string]any
			if err := cbor.Unmarshal(raw, &doc); err != nil {
				t.Fatalf("answer is not CBOR: %v (% x)", err, raw)
			}
			// Decode nested maps with string keys for the checks.
			var typed map[string]any
			if err := independentDecMode.Unmarshal(raw, &typed); err != nil {
				t.Fatal(err)
			}
			if tc.check != nil {
				tc.check(t, typed)
			}
		})
	}
}
