package app

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// fakeStream is a server stream whose client sent req, then nothing.
type fakeStream struct {
	grpc.ServerStream
	ctx   context.Context
	req   proto.Message
	reads int
}

func (s *fakeStream) Context() context.Context { return s.ctx }

func (s *fakeStream) RecvMsg(m any) error {
	if s.reads++; s.reads > 1 {
		return io.EOF
	}
	proto.Merge(m.(proto.Message), s.req)
	return nil
}

type ctxKey struct{}

// TestOpenThrough calls the interceptor directly: a server stream of the
// API passes the chain with its request, refused or admitted; admitted,
// its handler gets the request and runs with the chain's values under the
// stream's own context, which the chain's deadline does not end; other
// streams pass untouched.
func TestOpenThrough(t *testing.T) {
	refusal := status.Error(codes.Unauthenticated, "no key")
	// chain is the unary chain in small: its own deadline around the
	// handler (limits.timeout), a value for what follows, a refusal for
	// "refuse".
	var saw []any
	chain := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		saw = append(saw, req, info.FullMethod)
		if req.(*shebav1.StreamEventsRequest).GetAfterEventId() == "refuse" {
			return nil, refusal
		}
		ctx, cancel := context.WithTimeout(context.WithValue(ctx, ctxKey{}, "caller"), time.Minute)
		defer cancel()
		return handler(ctx, req)
	}
	open := openThrough(chain)
	stream := &grpc.StreamServerInfo{FullMethod: shebav1.EventService_StreamEvents_FullMethodName, IsServerStream: true}

	t.Run("admitted", func(t *testing.T) {
		saw = nil
		req := &shebav1.StreamEventsRequest{AfterEventId: "evt-1", EventTypes: []string{"account.created"}}
		ss := &fakeStream{ctx: t.Context(), req: req}
		ran := false
		err := open(nil, ss, stream, func(_ any, s grpc.ServerStream) error {
			ran = true
			if got := s.Context().Value(ctxKey{}); got != "caller" {
				t.Errorf("the chain's value: got %v, want caller", got)
			}
			if _, ok := s.Context().Deadline(); ok || s.Context().Err() != nil {
				t.Errorf("the stream's context has the opening's deadline or has ended: %v", s.Context().Err())
			}
			var got shebav1.StreamEventsRequest
			if err := s.RecvMsg(&got); err != nil || !proto.Equal(&got, req) {
				t.Errorf("RecvMsg: got %v, %v; want %v", &got, err, req)
			}
			if err := s.RecvMsg(&got); !errors.Is(err, io.EOF) {
				t.Errorf("second RecvMsg: got %v, want EOF", err)
			}
			return nil
		})
		if err != nil || !ran {
			t.Errorf("got %v, ran %v; want the handler run", err, ran)
		}
		if len(saw) != 2 || !proto.Equal(saw[0].(proto.Message), req) || saw[1] != stream.FullMethod {
			t.Errorf("the chain saw %v, want the request and the method", saw)
		}
	})
	t.Run("refused", func(t *testing.T) {
		ss := &fakeStream{ctx: t.Context(), req: &shebav1.StreamEventsRequest{AfterEventId: "refuse"}}
		err := open(nil, ss, stream, func(any, grpc.ServerStream) error {
			t.Error("the handler ran")
			return nil
		})
		if err != refusal {
			t.Errorf("got %v, want the chain's refusal", err)
		}
	})
	t.Run("another stream", func(t *testing.T) {
		saw = nil
		ss := &fakeStream{ctx: t.Context()}
		var got grpc.ServerStream
		err := open(nil, ss, &grpc.StreamServerInfo{FullMethod: "/grpc.health.v1.Health/Watch", IsServerStream: true},
			func(_ any, s grpc.ServerStream) error { got = s; return nil })
		if err != nil || got != ss || len(saw) != 0 || ss.reads != 0 {
			t.Errorf("got %v, stream %p (want %p), chain saw %v, %d reads; want it passed untouched", err, got, ss, saw, ss.reads)
		}
	})
}
