package app

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// openThrough returns a stream interceptor under which the opening of a
// server-streaming method of the API passes chain as a unary call does
// (auth, the rate limits once, validation, the hook, the log and metrics
// of the opening): the stream's one request is received first, chain runs
// with it around a handler that admits the call without answering, and
// the stream then runs with the values the chain gave its handler's
// context (the caller, the request id) under the stream's own context, so
// that limits.timeout bounds the opening, not the stream. A refusal of the
// chain is the call's answer, its headers (X-Request-Id, RateLimit)
// included. Other streams (health Watch, reflection) pass as they are.
//
// The browser protocols' grpc.Server takes it: the business gRPC server's
// stream side is the chain's own (chain.go).
func openThrough(chain grpc.UnaryServerInterceptor) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		m := shebav1.Method(info.FullMethod)
		if m == nil || !m.ServerStreams || info.IsClientStream {
			return handler(srv, ss)
		}
		req := m.NewRequest()
		if err := ss.RecvMsg(req); err != nil {
			return err
		}
		var admitted context.Context
		if _, err := chain(ss.Context(), req, &grpc.UnaryServerInfo{Server: srv, FullMethod: info.FullMethod},
			func(ctx context.Context, _ any) (any, error) {
				admitted = ctx
				return nil, nil
			}); err != nil {
			return err
		}
		if admitted == nil {
			// The chain answered without its handler: nothing to stream.
			return nil
		}
		return handler(srv, &openedStream{
			ServerStream: ss,
			ctx:          streamContext{Context: ss.Context(), values: admitted},
			req:          req,
		})
	}
}

// streamContext is the stream's context (its deadline and cancellation)
// with the values of the chain's.
type streamContext struct {
	context.Context
	values context.Context
}

func (c streamContext) Value(key any) any { return c.values.Value(key) }

// openedStream is a stream whose request the chain has read: its first
// RecvMsg gives it to the handler.
type openedStream struct {
	grpc.ServerStream
	ctx  context.Context
	req  proto.Message
	read bool
}

func (s *openedStream) Context() context.Context { return s.ctx }

func (s *openedStream) RecvMsg(m any) error {
	if s.read {
		return s.ServerStream.RecvMsg(m)
	}
	s.read = true
	proto.Merge(m.(proto.Message), s.req)
	return nil
}
