package gateway

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// echoAccounts answers GetAccount with the account id it got, and sets
// response metadata.
type echoAccounts struct {
	shebav1.UnimplementedAccountServiceServer
	got *shebav1.GetAccountRequest
}

func (e *echoAccounts) GetAccount(ctx context.Context, req *shebav1.GetAccountRequest) (*shebav1.GetAccountResponse, error) {
	e.got = req
	md, _ := metadata.FromIncomingContext(ctx)
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-seen", md.Get("x-api-key")[0]))
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "t"))
	if out, _ := metadata.FromOutgoingContext(ctx); len(out) > 0 {
		return nil, status.Error(codes.Internal, "the caller's outgoing metadata leaked into the handler")
	}
	if v := metadata.ValueFromIncomingContext(ctx, "x-api-key"); len(v) != 1 || v[0] != "k1" {
		return nil, status.Errorf(codes.Internal, "x-api-key by ValueFromIncomingContext: got %q", v)
	}
	if p, ok := peer.FromContext(ctx); !ok || p.Addr.String() != "inproc" {
		return nil, status.Errorf(codes.Internal, "peer: got %v", p)
	}
	if m, _ := grpc.Method(ctx); m != "/sheba.v1.AccountService/GetAccount" {
		return nil, status.Errorf(codes.Internal, "grpc.Method: got %q", m)
	}
	if ctx.Value(callerKey{}) != "caller" {
		return nil, status.Error(codes.Internal, "a value of the caller's context is missing")
	}
	if _, ok := ctx.Deadline(); !ok {
		return nil, status.Error(codes.Internal, "the caller's deadline is missing")
	}
	// The outgoing metadata a handler adds is its own.
	if out, _ := metadata.FromOutgoingContext(metadata.AppendToOutgoingContext(ctx, "x-out", "1")); len(out) != 1 || out.Get("x-out")[0] != "1" {
		return nil, status.Errorf(codes.Internal, "outgoing metadata the handler set: got %v", out)
	}
	return &shebav1.GetAccountResponse{Account: &shebav1.Account{Id: req.GetAccountId()}}, nil
}

type callerKey struct{}

// TestInprocChannel calls a handler over the Channel, with the handler's
// context made in one allocation (callContext) and, as when grpc-go's keys
// cannot be learned, with grpc-go's own functions.
func TestInprocChannel(t *testing.T) {
	if !grpcKeysKnown {
		t.Fatal("grpc-go's context keys were not learned: every REST call takes the plain contexts")
	}
	t.Run("callContext", testInprocChannel)
	t.Run("plain", func(t *testing.T) {
		grpcKeysKnown = false
		defer func() { grpcKeysKnown = true }()
		testInprocChannel(t)
	})
}

func testInprocChannel(t *testing.T) {
	intercepted := ""
	c := NewChannel(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		intercepted = info.FullMethod
		if !IsInProcess(ctx) {
			t.Error("handler context is not marked in-process")
		}
		return h(ctx, req)
	})
	impl := &echoAccounts{}
	c.RegisterService(&shebav1.AccountService_ServiceDesc, impl)
	client := shebav1.NewAccountServiceClient(c)

	ctx, cancel := context.WithTimeout(context.WithValue(t.Context(), callerKey{}, "caller"), time.Minute)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", "k1")
	req := &shebav1.GetAccountRequest{AccountId: "a1"}
	var header, trailer metadata.MD
	resp, err := client.GetAccount(ctx, req, grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil {
		t.Fatalf("GetAccount: %v", err)
	}
	if intercepted != "/sheba.v1.AccountService/GetAccount" {
		t.Errorf("interceptor saw %q", intercepted)
	}
	wantEchoAnswer(t, resp, header, trailer)
	// Each side has its own copy of the messages.
	if impl.got == req {
		t.Error("the handler got the caller's request message itself")
	}
	req.AccountId = "changed"
	if impl.got.GetAccountId() != "a1" {
		t.Error("changing the caller's request changed the handler's")
	}

	err = c.Invoke(t.Context(), "/sheba.v1.AccountService/Nope", req, &shebav1.GetAccountResponse{})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("unknown method: got %v, want Unimplemented", err)
	}
}

// TestInprocChannelStreams: a server-streaming method's opening passes the
// opening chain, with the call's incoming metadata and the request sent:
// the chain's refusal is the call's answer; a call it lets through runs
// the handler, with the chain's context values but not its deadline, and
// the client receives copies of what it sends, then its end; canceling
// the client's context ends the handler's. An unknown stream is
// UNIMPLEMENTED at once.
func TestInprocChannelStreams(t *testing.T) {
	refused := status.Error(codes.Unauthenticated, "no key")
	var seen []string
	impl := &streamingEvents{ended: make(chan error, 1)}
	c := NewChannel(nil)
	c.RegisterService(&shebav1.EventService_ServiceDesc, impl)
	c.OpenStreamsThrough(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		key := metadata.ValueFromIncomingContext(ctx, "x-api-key")
		seen = append(seen, info.FullMethod+" "+req.(*shebav1.StreamEventsRequest).GetAfterEventId())
		if len(key) == 0 {
			return nil, refused
		}
		// The chain's timeout bounds the opening only.
		ctx, cancel := context.WithTimeout(context.WithValue(ctx, streamTestKey{}, "caller"), time.Nanosecond)
		defer cancel()
		return handler(ctx, req)
	})
	var order []string
	around := func(name string) grpc.StreamServerInterceptor {
		return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			order = append(order, name+" "+info.FullMethod)
			return handler(srv, ss)
		}
	}
	c.StreamThrough(around("first"), around("second"))
	client := shebav1.NewEventServiceClient(c)
	s, err := client.StreamEvents(t.Context(), &shebav1.StreamEventsRequest{AfterEventId: "a1"})
	if err == nil {
		_, err = s.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("without a key: got %v, want the chain's Unauthenticated", err)
	}

	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(t.Context(), "x-api-key", "k1"))
	defer cancel()
	s, err = client.StreamEvents(ctx, &shebav1.StreamEventsRequest{AfterEventId: "a1"})
	if err != nil {
		t.Fatal(err)
	}
	var got []*shebav1.StreamEventsResponse
	for _, want := range []string{"c1", "c2"} {
		m, err := s.Recv()
		got = append(got, m)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.GetHeartbeat().GetCursor(); got != want {
			t.Errorf("got cursor %q, want %q", got, want)
		}
	}
	if impl.value != "caller" || impl.deadline {
		t.Errorf("the handler's context: value %q, deadline %v; want the chain's value and no deadline", impl.value, impl.deadline)
	}
	cancel()
	if err := <-impl.ended; status.Code(err) != codes.Canceled {
		t.Errorf("the handler's stream ended with %v, want Canceled", err)
	}
	wantOrder := []string{"first /sheba.v1.EventService/StreamEvents", "second /sheba.v1.EventService/StreamEvents"}
	if !slices.Equal(order, wantOrder) {
		t.Errorf("stream interceptors ran %q, want %q", order, wantOrder)
	}
	for i, m := range got {
		if m == impl.sent[i] {
			t.Error("the client got the handler's message itself")
		}
	}
	want := []string{"/sheba.v1.EventService/StreamEvents a1", "/sheba.v1.EventService/StreamEvents a1"}
	if len(seen) != 2 || seen[0] != want[0] || seen[1] != want[1] {
		t.Errorf("the chain saw %q, want %q", seen, want)
	}
	_, err = c.NewStream(t.Context(), &grpc.StreamDesc{ServerStreams: true}, "/sheba.v1.EventService/Nope")
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("an unknown stream: got %v, want Unimplemented", err)
	}
}

// streamTestKey is a context value the opening chain sets.
type streamTestKey struct{}

// streamingEvents sends heartbeats c1 and c2, then waits for its client
// to go away, reporting the error that ends it on ended.
type streamingEvents struct {
	shebav1.UnimplementedEventServiceServer
	sent     []*shebav1.StreamEventsResponse
	value    any
	deadline bool
	ended    chan error
}

func (e *streamingEvents) StreamEvents(_ *shebav1.StreamEventsRequest, s grpc.ServerStreamingServer[shebav1.StreamEventsResponse]) error {
	e.value = s.Context().Value(streamTestKey{})
	_, e.deadline = s.Context().Deadline()
	for _, c := range []string{"c1", "c2"} {
		m := &shebav1.StreamEventsResponse{Message: &shebav1.StreamEventsResponse_Heartbeat{Heartbeat: &shebav1.Heartbeat{Cursor: c}}}
		e.sent = append(e.sent, m)
		if err := s.Send(m); err != nil {
			e.ended <- err
			return err
		}
	}
	// The next send waits for a reader until the client goes away.
	err := s.Send(&shebav1.StreamEventsResponse{})
	e.ended <- err
	return err
}

// TestChannelUnaryThrough: a Channel whose unary calls pass the chain
// (UnaryThrough) calls a method of the table through it, with the method's
// info, the request the caller decoded (not a copy, nor the registered
// handler's) and the method itself behind it; its answer, headers and
// trailers come back as the registered handler's would.
func TestChannelUnaryThrough(t *testing.T) {
	var info *grpc.UnaryServerInfo
	var chainReq any
	chain := func(ctx context.Context, req any, i *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		info, chainReq = i, req
		return h(ctx, req)
	}
	c := NewChannel(nil)
	impl := &echoAccounts{}
	// The services are registered with their chain (as
	// server.Services.RegisterChained does): here, a handler that must
	// not run.
	desc := shebav1.AccountService_ServiceDesc
	desc.Methods = slices.Clone(desc.Methods)
	for i := range desc.Methods {
		desc.Methods[i].Handler = func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
			t.Error("the registered handler ran")
			return nil, status.Error(codes.Internal, "registered handler")
		}
	}
	c.RegisterService(&desc, impl)
	c.UnaryThrough(chain)

	ctx, cancel := context.WithTimeout(context.WithValue(t.Context(), callerKey{}, "caller"), time.Minute)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", "k1")
	req := &shebav1.GetAccountRequest{AccountId: "a1"}
	var header, trailer metadata.MD
	resp, err := shebav1.NewAccountServiceClient(c).GetAccount(ctx, req, grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil {
		t.Fatalf("GetAccount: %v", err)
	}
	if info == nil || info.FullMethod != "/sheba.v1.AccountService/GetAccount" || info.Server != impl {
		t.Errorf("the chain's info: got %+v", info)
	}
	if chainReq != req || impl.got != req {
		t.Error("the chain and the method did not get the caller's request")
	}
	wantEchoAnswer(t, resp, header, trailer)
}

// wantEchoAnswer checks what echoAccounts answers a GetAccount of "a1"
// called with x-api-key k1: the account, the key echoed in a header, and
// its trailer.
func wantEchoAnswer(t *testing.T, resp *shebav1.GetAccountResponse, header, trailer metadata.MD) {
	t.Helper()
	if resp.GetAccount().GetId() != "a1" {
		t.Errorf("response: got %v", resp)
	}
	if got := header.Get("x-seen"); len(got) != 1 || got[0] != "k1" {
		t.Errorf("header x-seen: got %q, want the incoming x-api-key k1", got)
	}
	if got := trailer.Get("x-trailer"); len(got) != 1 || got[0] != "t" {
		t.Errorf("trailer: got %q", got)
	}
}
