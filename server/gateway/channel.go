package gateway

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// Channel is the gateway's connection to the services: a
// grpc.ClientConnInterface that calls the registered handlers directly,
// through the interceptor chain, in the caller's goroutine.
//
// It is ours rather than grpchan's inprocgrpc for a measured reason: inprocgrpc runs every call on a new goroutine whose stack
// then grows, and hands messages across a channel; in BenchmarkGatewayJSON
// that was over a quarter of the CPU of a REST ping (stack growth alone
// 11%). Only unary calls are served: a server-streaming method's opening
// passes the chain, as a unary call's does, and is then answered
// UNIMPLEMENTED (NewStream); serving streams in process is a later step.
//
// The handler's context is the caller's (so the HTTP span, the deadline and
// the cancellation carry over) with the caller's outgoing metadata turned
// into incoming metadata, and the request and response are copied, so
// neither side can change the other's message.
type Channel struct {
	interceptor grpc.UnaryServerInterceptor
	methods     map[string]inprocMethod // by full method name
	// streams are the server-streaming methods registered, by full
	// method name.
	streams map[string]bool
	// opening is the chain a stream's opening passes (OpenStreamsThrough).
	opening grpc.UnaryServerInterceptor
}

type inprocMethod struct {
	impl    any
	handler grpc.MethodHandler
	// mask infers the update mask of a PATCH that names none
	// (patchmask.go); nil for the other methods.
	mask *maskInference
}

// NewChannel returns a Channel whose calls pass interceptor (the chain)
// before the handler. With interceptor nil the handlers are called as
// registered: sheba's bring the chain themselves
// (server.Services.RegisterChained).
func NewChannel(interceptor grpc.UnaryServerInterceptor) *Channel {
	return &Channel{interceptor: interceptor, methods: map[string]inprocMethod{}, streams: map[string]bool{}, opening: interceptor}
}

// OpenStreamsThrough makes the opening of every stream pass chain before it
// is answered UNIMPLEMENTED (NewStream): the key, the limits and
// validation judge it as they judge a unary call, so a call without a key
// is refused UNAUTHENTICATED (401), whatever the method. A Channel made
// with an interceptor uses that one. It is not safe to call once calls
// have started.
func (c *Channel) OpenStreamsThrough(chain grpc.UnaryServerInterceptor) {
	c.opening = chain
}

// RegisterService registers the unary methods of impl, and notes its
// server-streaming ones (NewStream). It is not safe to call once calls
// have started.
func (c *Channel) RegisterService(desc *grpc.ServiceDesc, impl any) {
	for _, sd := range desc.Streams {
		if sd.ServerStreams && !sd.ClientStreams {
			c.streams["/"+desc.ServiceName+"/"+sd.StreamName] = true
		}
	}
	for _, m := range desc.Methods {
		full := "/" + desc.ServiceName + "/" + m.MethodName
		var mask *maskInference
		if t := shebav1.Method(full); t != nil {
			mask = newMaskInference(*t)
		}
		c.methods[full] = inprocMethod{impl: impl, handler: m.Handler, mask: mask}
	}
}

type inprocKey struct{}

// inprocAddr is the peer address of in-process calls.
type inprocAddr struct{}

func (inprocAddr) Network() string { return "inproc" }
func (inprocAddr) String() string  { return "inproc" }

var inprocPeer = &peer.Peer{Addr: inprocAddr{}}

// IsInProcess reports whether ctx is the context of a call that came over a
// Channel: a REST call.
func IsInProcess(ctx context.Context) bool {
	return ctx.Value(inprocKey{}) != nil
}

// Invoke calls method with req and copies the answer into resp. Header and
// trailer call options receive the response metadata.
func (c *Channel) Invoke(ctx context.Context, method string, req, resp any, opts ...grpc.CallOption) error {
	m, ok := c.methods[method]
	if !ok {
		return status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	if m.mask != nil {
		m.mask.infer(req.(proto.Message))
	}
	md, room := incomingMetadata(ctx)
	sctx, stream := newCallContext(ctx, method, md, room)
	decode := func(in any) error {
		proto.Merge(in.(proto.Message), req.(proto.Message))
		return nil
	}
	out, err := m.handler(m.impl, sctx, decode, c.interceptor)
	stream.deliver(opts)
	if err != nil {
		return err
	}
	if out == nil {
		return status.Error(codes.Internal, "handler returned neither a response nor an error")
	}
	r := resp.(proto.Message)
	proto.Reset(r)
	proto.Merge(r, out.(proto.Message))
	return nil
}

// The handler's context holds five values: the in-process mark, the
// incoming metadata, no outgoing metadata (the caller's is not the
// handler's), the peer and the server transport stream. Set one by one
// with grpc-go's functions, each is a context of its own: seven
// allocations on every REST call, a tenth of BenchmarkGatewayJSON/ping's.
// callContext is one context that answers all five, made in one
// allocation with the stream it holds.
//
// grpc-go's keys are unexported, so they are learned once, at start, by
// asking its readers (metadata.FromIncomingContext…) on a context that
// records the key it is asked for (keyProbe), and each is checked against a
// context made by grpc-go's own setter: a key that is not learned, or not
// the setter's, leaves every call on the plain contexts (plainCallContext),
// so a grpc-go that stores them otherwise costs allocations, never a
// missing value. TestInprocChannel runs both.
var grpcKeys, grpcKeysKnown = learnGRPCKeys()

type contextKeys struct {
	incoming, outgoing, peer, stream any
}

// keyProbe is a context that remembers the key it was asked for last.
type keyProbe struct {
	context.Context
	key any
}

func (p *keyProbe) Value(key any) any {
	p.key = key
	return nil
}

// learnGRPCKeys returns the keys of grpc-go's context values, and whether
// each was learned and is the one its setter uses.
func learnGRPCKeys() (contextKeys, bool) {
	probe := func(read func(context.Context)) any {
		p := &keyProbe{Context: context.Background()}
		read(p)
		return p.key
	}
	k := contextKeys{
		incoming: probe(func(ctx context.Context) { metadata.FromIncomingContext(ctx) }),
		outgoing: probe(func(ctx context.Context) { metadata.FromOutgoingContext(ctx) }),
		peer:     probe(func(ctx context.Context) { peer.FromContext(ctx) }),
		stream:   probe(func(ctx context.Context) { grpc.ServerTransportStreamFromContext(ctx) }),
	}
	// Each setter's context answers its own key, with the value given,
	// and none of the others.
	bg, md, s := context.Background(), metadata.MD{}, &inprocStream{}
	set := []context.Context{
		metadata.NewIncomingContext(bg, md),
		metadata.NewOutgoingContext(bg, md),
		peer.NewContext(bg, inprocPeer),
		grpc.NewContextWithServerTransportStream(bg, s),
	}
	keys := []any{k.incoming, k.outgoing, k.peer, k.stream}
	for i, ctx := range set {
		for j, key := range keys {
			if (ctx.Value(key) != nil) != (i == j) {
				return k, false
			}
		}
	}
	_, isMD := set[0].Value(k.incoming).(metadata.MD)
	p, _ := set[2].Value(k.peer).(*peer.Peer)
	st, _ := set[3].Value(k.stream).(*inprocStream)
	return k, isMD && p == inprocPeer && st == s
}

// callContext is the handler's context of an in-process call: the caller's
// ctx with the values of the call answered from its fields.
type callContext struct {
	context.Context
	md     metadata.MD
	stream inprocStream
}

func (c *callContext) Value(key any) any {
	switch key {
	case inprocKey{}:
		return true
	case grpcKeys.incoming:
		return c.md
	case grpcKeys.outgoing:
		return nil
	case grpcKeys.peer:
		return inprocPeer
	case grpcKeys.stream:
		return grpc.ServerTransportStream(&c.stream)
	}
	return c.Context.Value(key)
}

// newCallContext returns the handler's context of a call of method from
// ctx, with md as its incoming metadata, and the stream that collects its
// response metadata. The context is made in room, if not nil.
func newCallContext(ctx context.Context, method string, md metadata.MD, room *callContext) (context.Context, *inprocStream) {
	if !grpcKeysKnown {
		return plainCallContext(ctx, method, md)
	}
	c := room
	if c == nil {
		c = new(callContext)
	}
	*c = callContext{Context: ctx, md: md, stream: inprocStream{method: method}}
	return c, &c.stream
}

// plainCallContext is newCallContext with grpc-go's own functions.
func plainCallContext(ctx context.Context, method string, md metadata.MD) (context.Context, *inprocStream) {
	stream := &inprocStream{method: method}
	ctx = context.WithValue(ctx, inprocKey{}, true)
	ctx = metadata.NewIncomingContext(ctx, md)
	ctx = metadata.NewOutgoingContext(ctx, nil)
	ctx = peer.NewContext(ctx, inprocPeer)
	return grpc.NewContextWithServerTransportStream(ctx, stream), stream
}

// errNotInProcess answers the streams the Channel does not serve.
var errNotInProcess = reason.Error(codes.Unimplemented, reason.ForCode(codes.Unimplemented), "streams are not served over REST yet")

// NewStream opens a call of a server-streaming method that the Channel
// does not serve (yet): its request, once sent, passes the opening chain
// (OpenStreamsThrough), whose refusal is the call's answer, or else
// UNIMPLEMENTED. Streams of other kinds, and unknown methods, are
// UNIMPLEMENTED at once.
func (c *Channel) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if !c.streams[method] || desc.ClientStreams || c.opening == nil {
		return nil, errNotInProcess
	}
	return &refusedStream{ctx: ctx, method: method, opening: c.opening, opts: opts}, nil
}

// refusedStream is a stream the Channel opens only to refuse it: SendMsg
// runs the opening chain with its request, around a handler that answers
// errNotInProcess, and returns the chain's answer; nothing is received.
type refusedStream struct {
	ctx     context.Context
	method  string
	opening grpc.UnaryServerInterceptor
	opts    []grpc.CallOption

	header, trailer metadata.MD
	err             error
}

func (s *refusedStream) SendMsg(m any) error {
	md, room := incomingMetadata(s.ctx)
	sctx, stream := newCallContext(s.ctx, s.method, md, room)
	_, s.err = s.opening(sctx, m, &grpc.UnaryServerInfo{FullMethod: s.method},
		func(context.Context, any) (any, error) { return nil, errNotInProcess })
	stream.deliver(s.opts)
	s.header, s.trailer = stream.header.MD(), stream.trailer.MD()
	if rc, ok := s.ctx.Value(restCallKey{}).(*restCall); ok {
		rc.refusedHeader = s.header
	}
	if s.err == nil {
		s.err = errNotInProcess
	}
	return s.err
}

func (s *refusedStream) RecvMsg(any) error            { return s.err }
func (s *refusedStream) CloseSend() error             { return nil }
func (s *refusedStream) Context() context.Context     { return s.ctx }
func (s *refusedStream) Header() (metadata.MD, error) { return s.header, nil }
func (s *refusedStream) Trailer() metadata.MD         { return s.trailer }

// inprocStream collects the response metadata a handler sets with
// grpc.SetHeader, grpc.SendHeader and grpc.SetTrailer, copying none of it
// (mdSet).
type inprocStream struct {
	method string

	mu              sync.Mutex
	header, trailer mdSet
}

func (s *inprocStream) Method() string { return s.method }

func (s *inprocStream) SetHeader(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.header.Add(md)
	return nil
}

func (s *inprocStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }

func (s *inprocStream) SetTrailer(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trailer.Add(md)
	return nil
}

// deliver hands the collected metadata to the Header and Trailer call
// options among opts.
func (s *inprocStream) deliver(opts []grpc.CallOption) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			*o.HeaderAddr = s.header.MD()
		case grpc.TrailerCallOption:
			*o.TrailerAddr = s.trailer.MD()
		case grpc.PeerCallOption:
			*o.PeerAddr = *inprocPeer
		}
	}
}
