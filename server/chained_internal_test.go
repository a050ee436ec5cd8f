package server

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// TestDirectCoversEveryMethod: every method of every service has its
// direct call, decoding into the message its generated handler decodes
// into, and direct names no method that does not exist.
func TestDirectCoversEveryMethod(t *testing.T) {
	stop := errors.New("decoded")
	seen := 0
	for _, desc := range descs {
		for _, m := range desc.Methods {
			full := "/" + desc.ServiceName + "/" + m.MethodName
			d, ok := direct[full]
			if !ok {
				t.Errorf("%s: not in direct", full)
				continue
			}
			seen++
			var generated any
			_, err := m.Handler(nil, context.Background(), func(in any) error {
				generated = in
				return stop
			}, nil)
			if !errors.Is(err, stop) {
				t.Fatalf("%s: generated handler: %v", full, err)
			}
			if got, want := reflect.TypeOf(d.newRequest().message()), reflect.TypeOf(generated); got != want {
				t.Errorf("%s: direct decodes into %v, the generated handler into %v", full, got, want)
			}
		}
	}
	if seen != len(direct) {
		t.Errorf("direct has %d methods, the services %d", len(direct), seen)
	}
}

// registrar keeps what is registered on it.
type registrar map[string]grpc.MethodDesc

func (r registrar) RegisterService(desc *grpc.ServiceDesc, _ any) {
	for _, m := range desc.Methods {
		r["/"+desc.ServiceName+"/"+m.MethodName] = m
	}
}

// TestRegisterChained: a method registered by RegisterChained runs the
// chain with its request decoded, its full name and the implementation,
// and the chain's handler is the service's method; a decoding error stops
// the call before the chain; a method outside direct gets the chain as its
// generated handler's interceptor.
func TestRegisterChained(t *testing.T) {
	type seen struct {
		method string
		server any
		req    any
	}
	var calls []seen
	chain := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		calls = append(calls, seen{info.FullMethod, info.Server, req})
		return handler(ctx, req)
	}
	s := &Services{ping: pingServer{}}
	r := registrar{}
	s.RegisterChained(r, chain)
	ping := r[shebav1.PingService_Ping_FullMethodName]
	// What a codec sees: a message, whose reflection is the request's.
	dec := func(in any) error {
		if m, ok := in.(proto.Message); !ok || m.ProtoReflect().Descriptor().FullName() != "sheba.v1.PingRequest" {
			t.Fatalf("decoding into %T", in)
		}
		return nil
	}
	out, err := ping.Handler(nil, context.Background(), dec, nil)
	if err != nil || out.(*shebav1.PingResponse).GetMessage() != "pong" {
		t.Fatalf("Ping through the chain: %v, %v", out, err)
	}
	if len(calls) != 1 || calls[0].method != shebav1.PingService_Ping_FullMethodName || calls[0].server != s.ping {
		t.Fatalf("the chain saw %+v, want one call of Ping on the ping server", calls)
	}
	if _, ok := calls[0].req.(*shebav1.PingRequest); !ok {
		t.Errorf("the chain got a %T, want the decoded *PingRequest", calls[0].req)
	}

	bad := errors.New("bad message")
	if _, err := ping.Handler(nil, context.Background(), func(any) error { return bad }, nil); !errors.Is(err, bad) {
		t.Errorf("a decoding error: got %v, want it back", err)
	}
	if len(calls) != 1 {
		t.Errorf("the chain ran for a message that did not decode")
	}

	// A method direct does not know: its generated handler, with the chain.
	delete(direct, shebav1.PingService_Ping_FullMethodName)
	t.Cleanup(func() { direct[shebav1.PingService_Ping_FullMethodName] = method(shebav1.PingServiceServer.Ping) })
	r = registrar{}
	s.RegisterChained(r, chain)
	out, err = r[shebav1.PingService_Ping_FullMethodName].Handler(s.ping, context.Background(), dec, nil)
	if err != nil || out.(*shebav1.PingResponse).GetMessage() != "pong" || len(calls) != 2 {
		t.Fatalf("Ping outside direct: %v, %v, the chain ran %d times in all, want 2", out, err, len(calls))
	}
}

// TestRegisterChainedRefusal: a request that the codec refused reaches the
// chain as a refusal, which CheckRequest answers, and never the handler.
func TestRegisterChainedRefusal(t *testing.T) {
	refusal := errors.New("refused")
	var got error
	chain := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if got = CheckRequest(req); got != nil {
			return nil, got
		}
		return handler(ctx, req)
	}
	s := &Services{ping: pingServer{}}
	r := registrar{}
	s.RegisterChained(r, chain)
	dec := func(in any) error {
		in.(decodeTarget).refuse(refusal)
		return nil
	}
	if _, err := r[shebav1.PingService_Ping_FullMethodName].Handler(nil, context.Background(), dec, nil); !errors.Is(err, refusal) || !errors.Is(got, refusal) {
		t.Errorf("got %v from the call, %v from CheckRequest; want the refusal", err, got)
	}
}
