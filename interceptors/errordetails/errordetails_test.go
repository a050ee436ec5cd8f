package errordetails_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/errordetails"
	"github.com/shebasvc/sheba/interceptors/interceptortest"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/interceptors/retryafter"
)

func retryDelay(st *status.Status) time.Duration {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

func TestServer(t *testing.T) {
	var answer func(ctx context.Context) error
	client := interceptortest.Serve(t, errordetails.UnaryServerInterceptor(), func(ctx context.Context) (*shebav1.PingResponse, error) {
		if err := answer(ctx); err != nil {
			return nil, err
		}
		return &shebav1.PingResponse{Message: "pong"}, nil
	})
	for _, test := range []struct {
		name       string
		answer     func(ctx context.Context) error
		wantCode   codes.Code
		wantReason string
		wantRetry  string // retry-after metadata, "" for none
	}{
		{"success", func(context.Context) error { return nil }, codes.OK, "", ""},
		{"reason of the code", func(context.Context) error { return status.Error(codes.AlreadyExists, "x") }, codes.AlreadyExists, "ALREADY_EXISTS", ""},
		{"own reason", func(context.Context) error { return reason.Error(codes.Unauthenticated, reason.LoginFailed, "x") }, codes.Unauthenticated, reason.LoginFailed, ""},
		{"503 of 1 s", func(context.Context) error { return status.Error(codes.Unavailable, "x") }, codes.Unavailable, "UNAVAILABLE", "1"},
		{"429 with a hint", func(ctx context.Context) error {
			retryafter.Set(ctx, 4200*time.Millisecond)
			return reason.Error(codes.ResourceExhausted, reason.Overloaded, "x")
		}, codes.ResourceExhausted, reason.Overloaded, "5"},
		{"not a status", func(context.Context) error { return context.Canceled }, codes.Unknown, "UNKNOWN", ""},
	} {
		t.Run(test.name, func(t *testing.T) {
			answer = test.answer
			var header metadata.MD
			_, err := client.Ping(t.Context(), &shebav1.PingRequest{}, grpc.Header(&header))
			st := status.Convert(err)
			if st.Code() != test.wantCode || reason.Of(st) != test.wantReason {
				t.Fatalf("got %v %q, want %v %q", st.Code(), reason.Of(st), test.wantCode, test.wantReason)
			}
			got := header.Get(retryafter.Key)
			switch {
			case test.wantRetry == "" && (len(got) > 0 || retryDelay(st) != 0):
				t.Errorf("retry-after %q, RetryInfo %v; want neither", got, retryDelay(st))
			case test.wantRetry != "" && (len(got) != 1 || got[0] != test.wantRetry || retryDelay(st).String() != test.wantRetry+"s"):
				t.Errorf("retry-after %q, RetryInfo %v; want %s s in both", got, retryDelay(st), test.wantRetry)
			}
		})
	}
}
