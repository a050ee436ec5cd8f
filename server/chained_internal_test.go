package server

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// TestTableMatchesDescriptions: the method table names every method of
// every service's description, unary and streaming, in its order, and a
// unary method's NewRequest makes the message its generated handler decodes
// into, so RegisterChained serves every method as grpc-go's handler would;
// a streaming method of the table is one of the description's server
// streams, with Stream and no Call.
func TestTableMatchesDescriptions(t *testing.T) {
	stop := errors.New("decoded")
	for _, svc := range shebav1.Services {
		var unary []shebav1.MethodTable
		var streams []string
		for _, m := range svc.Methods {
			if m.ServerStreams {
				streams = append(streams, m.Name)
				if m.Stream == nil || m.Call != nil {
					t.Errorf("%s streams: want Stream and no Call", m.FullName)
				}
				continue
			}
			if m.Call == nil || m.Stream != nil {
				t.Errorf("%s is unary: want Call and no Stream", m.FullName)
			}
			unary = append(unary, m)
		}
		var descStreams []string
		for _, sd := range svc.Desc.Streams {
			if !sd.ServerStreams || sd.ClientStreams {
				t.Errorf("%s/%s: a stream the table cannot have", svc.Name, sd.StreamName)
			}
			descStreams = append(descStreams, sd.StreamName)
		}
		if !slices.Equal(streams, descStreams) {
			t.Errorf("%s: the table's streams %q, the description's %q", svc.Name, streams, descStreams)
		}
		if svc.Name != svc.Desc.ServiceName || len(unary) != len(svc.Desc.Methods) {
			t.Errorf("%s: table of %d unary methods, description %s of %d", svc.Name, len(unary), svc.Desc.ServiceName, len(svc.Desc.Methods))
			continue
		}
		for i, m := range svc.Desc.Methods {
			full := "/" + svc.Desc.ServiceName + "/" + m.MethodName
			if tm := unary[i]; tm.Name != m.MethodName || tm.FullName != full {
				t.Errorf("%s: the table's method %d is %s (%s)", full, i, tm.Name, tm.FullName)
				continue
			}
			var generated any
			_, err := m.Handler(nil, context.Background(), func(in any) error {
				generated = in
				return stop
			}, nil)
			if !errors.Is(err, stop) {
				t.Fatalf("%s: generated handler: %v", full, err)
			}
			if got, want := reflect.TypeOf(unary[i].NewRequest()), reflect.TypeOf(generated); got != want {
				t.Errorf("%s: the table makes a %v, the generated handler decodes into %v", full, got, want)
			}
		}
	}
}

// TestServicesMatchTable: New matches every service of the method table
// with its implementation.
func TestServicesMatchTable(t *testing.T) {
	s, err := New(nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := registrar{}
	s.Register(r)
	for _, svc := range shebav1.Services {
		for _, m := range svc.Methods {
			if _, ok := r[m.FullName]; !ok {
				t.Errorf("%s: not registered", m.FullName)
			}
		}
	}
	if want := len(Methods()); len(r) != want {
		t.Errorf("registered %d methods, the table has %d", len(r), want)
	}
}

// registrar keeps what is registered on it: the unary methods' handlers,
// and a zero MethodDesc for each stream.
type registrar map[string]grpc.MethodDesc

func (r registrar) RegisterService(desc *grpc.ServiceDesc, _ any) {
	for _, m := range desc.Methods {
		r["/"+desc.ServiceName+"/"+m.MethodName] = m
	}
	for _, sd := range desc.Streams {
		r["/"+desc.ServiceName+"/"+sd.StreamName] = grpc.MethodDesc{}
	}
}

// TestRegisterChained: a method registered by RegisterChained runs the
// chain with its request decoded, its full name and the implementation,
// and the chain's handler is the service's method; a decoding error stops
// the call before the chain.
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
	s := newTestServices(t)
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

	if m, ok := r[shebav1.EventService_StreamEvents_FullMethodName]; !ok || m.Handler != nil {
		t.Errorf("StreamEvents: registered %t, unary handler %t; want registered as a stream, as generated", ok, m.Handler != nil)
	}

	bad := errors.New("bad message")
	if _, err := ping.Handler(nil, context.Background(), func(any) error { return bad }, nil); !errors.Is(err, bad) {
		t.Errorf("a decoding error: got %v, want it back", err)
	}
	if len(calls) != 1 {
		t.Errorf("the chain ran for a message that did not decode")
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
	s := newTestServices(t)
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

// newTestServices returns the services over no store: enough for Ping.
func newTestServices(t *testing.T) *Services {
	t.Helper()
	s, err := New(nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestEventTypes: the event types endpoints may ask for are the events of
// the methods' policies, each once, and every type a handler publishes is
// among them.
func TestEventTypes(t *testing.T) {
	types := EventTypes()
	for _, e := range []string{EventAccountCreated, EventSubscriptionCreated, EventSubscriptionCanceled} {
		if !slices.Contains(types, e) {
			t.Errorf("%s is published but no method's policy emits it", e)
		}
	}
	if len(slices.Compact(slices.Sorted(slices.Values(types)))) != len(types) {
		t.Errorf("EventTypes() = %q repeats a type", types)
	}
}

// TestStreamPolicySets: StreamEvents needs the database, but is neither
// read-only (a stream reads the primary alone) nor a write (it changes
// nothing, so opening one does not send its caller's reads to the primary).
func TestStreamPolicySets(t *testing.T) {
	m := shebav1.EventService_StreamEvents_FullMethodName
	if !DatabaseMethods()[m] || ReadOnlyMethods()[m] || WriteMethods()[m] {
		t.Errorf("%s: database %t, read-only %t, write %t; want true, false, false",
			m, DatabaseMethods()[m], ReadOnlyMethods()[m], WriteMethods()[m])
	}
	if !WriteMethods()[shebav1.SubscriptionService_CreateSubscription_FullMethodName] {
		t.Errorf("CreateSubscription is no write")
	}
}
