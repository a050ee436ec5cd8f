package app

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// fakeStream records what is sent on it, and refuses headers once sent, as
// grpc-go's stream does.
type fakeStream struct {
	sends []metadata.MD
}

var errHeadersSent = errors.New("headers sent")

func (*fakeStream) Method() string { return "/sheba.v1.PingService/Ping" }

func (s *fakeStream) SetHeader(metadata.MD) error {
	if len(s.sends) > 0 {
		return errHeadersSent
	}
	return errors.New("SetHeader reached the stream before the headers were sent")
}

func (s *fakeStream) SendHeader(md metadata.MD) error {
	if len(s.sends) > 0 {
		return errHeadersSent
	}
	s.sends = append(s.sends, md)
	return nil
}

func (*fakeStream) SetTrailer(metadata.MD) error { return nil }

// TestSendHeadersOnce checks that the headers the chain sets go out once,
// all of them, when the chain returns, or when a handler sends them; that
// none go out when none were set; and that the stream answers the rest.
func TestSendHeadersOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		chain func(ctx context.Context) error
		want  []metadata.MD
	}{
		{"set twice", func(ctx context.Context) error {
			if err := grpc.SetHeader(ctx, metadata.Pairs("x-request-id", "r1")); err != nil {
				return err
			}
			return grpc.SetHeader(ctx, metadata.Pairs("ratelimit-policy", "p", "ratelimit", "s"))
		}, []metadata.MD{{"x-request-id": {"r1"}, "ratelimit-policy": {"p"}, "ratelimit": {"s"}}}},
		{"none", func(context.Context) error { return nil }, nil},
		{"sent by the handler", func(ctx context.Context) error {
			_ = grpc.SetHeader(ctx, metadata.Pairs("x-request-id", "r1"))
			if err := grpc.SendHeader(ctx, metadata.Pairs("x-sent", "1")); err != nil {
				return err
			}
			if err := grpc.SetHeader(ctx, metadata.Pairs("x-late", "1")); !errors.Is(err, errHeadersSent) {
				return errors.New("a header set after they were sent was not refused by the stream")
			}
			return nil
		}, []metadata.MD{{"x-request-id": {"r1"}, "x-sent": {"1"}}}},
		{"method", func(ctx context.Context) error {
			if m, _ := grpc.Method(ctx); m != "/sheba.v1.PingService/Ping" {
				return errors.New("grpc.Method: got " + m)
			}
			return nil
		}, nil},
	} {
		stream := &fakeStream{}
		ctx := grpc.NewContextWithServerTransportStream(t.Context(), stream)
		chain := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
			return req, tc.chain(ctx)
		}
		if _, err := sendHeadersOnce(chain)(ctx, "req", &grpc.UnaryServerInfo{}, nil); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if diff := cmp.Diff(tc.want, stream.sends); diff != "" {
			t.Errorf("%s: headers sent (-want +got):\n%s", tc.name, diff)
		}
	}
}
