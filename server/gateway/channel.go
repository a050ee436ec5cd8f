package gateway

import (
	"context"
	"io"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

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
// 11%). Unary calls and server streams are served (NewStream); a stream's
// handler runs on a goroutine of its own, as it must to send while the
// gateway writes.
//
// The handler's context is the caller's (so the HTTP span, the deadline and
// the cancellation carry over) with the caller's outgoing metadata turned
// into incoming metadata, and the request and response are copied, so
// neither side can change the other's message (but for UnaryThrough's
// calls, whose handler has the caller's request).
type Channel struct {
	interceptor grpc.UnaryServerInterceptor
	methods     map[string]inprocMethod // by full method name
	// streams are the server-streaming methods registered, by full
	// method name.
	streams map[string]streamMethod
	// opening is the chain a stream's opening passes (OpenStreamsThrough),
	// and streamInterceptor what runs around its handler (StreamThrough).
	opening            grpc.UnaryServerInterceptor
	streamInterceptors []grpc.StreamServerInterceptor
	// unary is the chain the unary calls of the method table's methods
	// pass (UnaryThrough), nil to call their handlers as registered.
	unary grpc.UnaryServerInterceptor
}

type streamMethod struct {
	impl    any
	handler grpc.StreamHandler
}

type inprocMethod struct {
	impl    any
	handler grpc.MethodHandler
	// mask infers the update mask of a PATCH that names none
	// (patchmask.go); nil for the other methods.
	mask *maskInference
	// info and call are the method's, made once from the method table
	// for UnaryThrough; nil for a method the table does not have.
	info *grpc.UnaryServerInfo
	call grpc.UnaryHandler
}

// NewChannel returns a Channel whose calls pass interceptor (the chain)
// before the handler. With interceptor nil the handlers are called as
// registered: sheba's bring the chain themselves
// (server.Services.RegisterChained).
func NewChannel(interceptor grpc.UnaryServerInterceptor) *Channel {
	return &Channel{interceptor: interceptor, methods: map[string]inprocMethod{}, streams: map[string]streamMethod{}, opening: interceptor}
}

// OpenStreamsThrough makes the opening of every stream pass chain before its
// handler runs (NewStream), for a Channel whose stream interceptors
// (StreamThrough) do not open streams themselves: the key, the limits and
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
			c.streams["/"+desc.ServiceName+"/"+sd.StreamName] = streamMethod{impl: impl, handler: sd.Handler}
		}
	}
	for _, m := range desc.Methods {
		full := "/" + desc.ServiceName + "/" + m.MethodName
		im := inprocMethod{impl: impl, handler: m.Handler}
		if t := shebav1.Method(full); t != nil {
			im.mask = newMaskInference(*t)
			im.info = &grpc.UnaryServerInfo{Server: impl, FullMethod: full}
			call := t.Call
			im.call = func(ctx context.Context, req any) (any, error) { return call(impl, ctx, req) }
		}
		c.methods[full] = im
	}
}

// UnaryThrough makes the unary calls of the method table's methods
// (shebav1.Method) pass chain, then the method itself (its entry's Call),
// as server.Services.RegisterChained's handlers do, with the request the
// gateway decoded rather than a copy of it: the gateway reads its request
// no more once it has made the call. A registered handler would make a new
// request and a function to decode it into on every call, 2 of
// BenchmarkGatewayJSON/ping's allocations. Register the services with the
// same chain, so that the other methods are served alike. It is not safe
// to call once calls have started.
func (c *Channel) UnaryThrough(chain grpc.UnaryServerInterceptor) {
	c.unary = chain
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
	var (
		out any
		err error
	)
	if c.unary != nil && m.call != nil {
		out, err = c.unary(sctx, req, m.info, m.call)
	} else {
		decode := func(in any) error {
			proto.Merge(in.(proto.Message), req.(proto.Message))
			return nil
		}
		out, err = m.handler(m.impl, sctx, decode, c.interceptor)
	}
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
	// peer is the client of a browser call (browserconnect.go), which is
	// not an in-process call to the chain; nil for a REST call's.
	peer *peer.Peer
}

func (c *callContext) Value(key any) any {
	switch key {
	case inprocKey{}:
		if c.peer != nil {
			return nil
		}
		return true
	case grpcKeys.incoming:
		return c.md
	case grpcKeys.outgoing:
		return nil
	case grpcKeys.peer:
		if c.peer != nil {
			return c.peer
		}
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
	// A browser call's peer (incomingMetadata) is kept.
	*c = callContext{Context: ctx, md: md, stream: inprocStream{method: method}, peer: c.peer}
	return c, &c.stream
}

// plainCallContext is newCallContext with grpc-go's own functions.
func plainCallContext(ctx context.Context, method string, md metadata.MD) (context.Context, *inprocStream) {
	stream := &inprocStream{method: method}
	p := inprocPeer
	if rc, ok := ctx.Value(restCallKey{}).(*restCall); ok && rc.browser {
		// A browser's call, not an in-process one.
		ctx, p = context.WithValue(ctx, inprocKey{}, nil), &rc.peer
	} else {
		ctx = context.WithValue(ctx, inprocKey{}, true)
	}
	ctx = metadata.NewIncomingContext(ctx, md)
	ctx = metadata.NewOutgoingContext(ctx, nil)
	ctx = peer.NewContext(ctx, p)
	return grpc.NewContextWithServerTransportStream(ctx, stream), stream
}

// errNotInProcess answers the streams the Channel does not serve: those
// that are not server streams.
var errNotInProcess = reason.Error(codes.Unimplemented, reason.ForCode(codes.Unimplemented), "only server streams are served over REST")

// NewStream opens a call of a server-streaming method. Its request, once
// sent (SendMsg), passes the opening chain (OpenStreamsThrough, if given)
// as a unary call does, whose refusal is the call's answer; then the
// method's handler
// runs on a goroutine of its own (behind the stream interceptors
// StreamThrough gives), and each message it sends reaches RecvMsg as a
// copy. The handler's context has the values the chain gave it (the
// caller, the request id) and the cancellation of ctx alone, not the
// chain's deadline: limits.timeout bounds the opening, and a stream runs
// until its client goes away or its own deadline (Grpc-Timeout). Streams
// of other kinds, and unknown methods, are UNIMPLEMENTED at once.
func (c *Channel) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	m, ok := c.streams[method]
	if !ok || desc.ClientStreams {
		return nil, errNotInProcess
	}
	return &clientStream{ctx: ctx, method: method, m: m, c: c, opts: opts,
		msgs: make(chan proto.Message), headerSent: make(chan struct{}), done: make(chan struct{})}, nil
}

// StreamThrough runs interceptors around every stream's handler, the first
// outermost, after its opening has passed the chain: what a grpc.Server's
// stream interceptors do for its streams (the drain at shutdown). It is
// not safe to call once calls have started.
func (c *Channel) StreamThrough(interceptors ...grpc.StreamServerInterceptor) {
	c.streamInterceptors = interceptors
}

// clientStream is the client's side of an in-process server stream, and
// serverStream the handler's: SendMsg there hands a copy of each message
// to RecvMsg here over msgs, waiting for it to be taken (so a client that
// does not read holds its handler, which the event hub then cuts when its
// buffer is full).
type clientStream struct {
	ctx    context.Context
	method string
	m      streamMethod
	c      *Channel
	opts   []grpc.CallOption

	// header is the call's response metadata (the chain's and the
	// handler's), set from stream by the handler's goroutine.
	stream     *inprocStream
	msgs       chan proto.Message
	headerOnce sync.Once
	headerSent chan struct{}
	header     metadata.MD
	done       chan struct{}
	err        error // the handler's, once done is closed
	opened     bool
}

// SendMsg opens the stream with its one request: the opening chain runs
// with it, and its refusal is returned; otherwise the handler starts.
func (s *clientStream) SendMsg(req any) error {
	if s.opened {
		return status.Error(codes.Internal, "a server stream takes one request")
	}
	s.opened = true
	md, room := incomingMetadata(s.ctx)
	sctx, stream := newCallContext(s.ctx, s.method, md, room)
	s.stream = stream
	if s.c.opening == nil {
		// The stream interceptors open it (StreamThrough).
		go s.serve(&serverStream{ctx: streamContext{Context: s.ctx, values: sctx}, client: s, req: req.(proto.Message)})
		return nil
	}
	var chainCtx context.Context
	_, err := s.c.opening(sctx, req, &grpc.UnaryServerInfo{Server: s.m.impl, FullMethod: s.method},
		func(ctx context.Context, _ any) (any, error) {
			chainCtx = ctx
			return &emptypb.Empty{}, nil
		})
	if err != nil || chainCtx == nil {
		// A stream refused at its opening: grpc-gateway does not pass
		// its header metadata on with the error (errorHandler does).
		stream.deliver(s.opts)
		header := stream.header.MD()
		if rc, ok := s.ctx.Value(restCallKey{}).(*restCall); ok {
			rc.refusedHeader = header
		}
		if err == nil {
			err = status.Error(codes.Internal, "the chain answered a stream's opening without calling it")
		}
		return err
	}
	ss := &serverStream{ctx: streamContext{Context: s.ctx, values: chainCtx}, client: s, req: req.(proto.Message)}
	go s.serve(ss)
	return nil
}

// serve runs the handler and ends the stream with its answer.
func (s *clientStream) serve(ss *serverStream) {
	err := s.run(ss)
	if err == nil && !s.headerSentYet() {
		s.sendHeader()
	}
	s.err = err
	close(s.done)
}

// run calls the handler behind the stream interceptors, a panic becoming
// INTERNAL as the chain's recovery makes it of a unary call's.
func (s *clientStream) run(ss *serverStream) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = reason.Error(codes.Internal, reason.Internal, "internal error")
		}
	}()
	info := &grpc.StreamServerInfo{FullMethod: s.method, IsServerStream: true}
	handler := s.m.handler
	for _, i := range slices.Backward(s.c.streamInterceptors) {
		next := handler
		handler = func(srv any, ss grpc.ServerStream) error { return i(srv, ss, info, next) }
	}
	return handler(s.m.impl, ss)
}

func (s *clientStream) headerSentYet() bool {
	select {
	case <-s.headerSent:
		return true
	default:
		return false
	}
}

// sendHeader fixes the header metadata, once.
func (s *clientStream) sendHeader() {
	s.headerOnce.Do(func() {
		s.header = s.stream.headerMD()
		close(s.headerSent)
	})
}

// Header waits for the header metadata: sent with the first message, by
// the handler (grpc.SendHeader), or at its end; a handler that ends with
// an error before any of these answers it here, so that the error is the
// call's answer before its first line (an ordinary REST error).
func (s *clientStream) Header() (metadata.MD, error) {
	select {
	case <-s.headerSent:
		return s.header, nil
	case <-s.done:
		if s.headerSentYet() {
			return s.header, nil
		}
		if rc, ok := s.ctx.Value(restCallKey{}).(*restCall); ok {
			rc.refusedHeader = s.stream.headerMD()
		}
		return nil, s.err
	case <-s.ctx.Done():
		return nil, status.FromContextError(s.ctx.Err()).Err()
	}
}

func (s *clientStream) RecvMsg(m any) error {
	select {
	case msg := <-s.msgs:
		r := m.(proto.Message)
		proto.Reset(r)
		if sm, ok := msg.(sharedMessage); ok {
			if rc, ok := s.ctx.Value(restCallKey{}).(*restCall); ok {
				// The REST side writes sm's own encoding in r's place
				// (rewriteShared): r stays empty.
				rc.shared, rc.sharedFor = sm, r
				return nil
			}
		}
		proto.Merge(r, msg)
		return nil
	case <-s.done:
		if s.err != nil {
			return s.err
		}
		return io.EOF
	case <-s.ctx.Done():
		return status.FromContextError(s.ctx.Err()).Err()
	}
}

func (s *clientStream) CloseSend() error         { return nil }
func (s *clientStream) Context() context.Context { return s.ctx }

func (s *clientStream) Trailer() metadata.MD {
	select {
	case <-s.done:
		return s.stream.trailerMD()
	default:
		return nil
	}
}

// serverStream is the handler's side of an in-process server stream.
type serverStream struct {
	ctx    context.Context
	client *clientStream
	req    proto.Message
	read   bool
}

func (ss *serverStream) Context() context.Context { return ss.ctx }

func (ss *serverStream) SetHeader(md metadata.MD) error {
	if ss.client.headerSentYet() {
		return status.Error(codes.Internal, "header already sent")
	}
	return ss.client.stream.SetHeader(md)
}

func (ss *serverStream) SendHeader(md metadata.MD) error {
	if err := ss.SetHeader(md); err != nil {
		return err
	}
	ss.client.sendHeader()
	return nil
}

func (ss *serverStream) SetTrailer(md metadata.MD) { _ = ss.client.stream.SetTrailer(md) }

// SendMsg hands a copy of m to the client, waiting until it takes it or
// goes away.
func (ss *serverStream) SendMsg(m any) error {
	ss.client.sendHeader()
	var msg proto.Message
	if sm, ok := m.(sharedMessage); ok {
		// Made for every stream alike and not changed once sent: not
		// copied.
		msg = sm
	} else {
		msg = proto.Clone(m.(proto.Message))
	}
	select {
	case ss.client.msgs <- msg:
		return nil
	case <-ss.ctx.Done():
		return status.FromContextError(ss.ctx.Err()).Err()
	}
}

// RecvMsg gives the stream's one request, then io.EOF.
func (ss *serverStream) RecvMsg(m any) error {
	if ss.read {
		return io.EOF
	}
	ss.read = true
	r := m.(proto.Message)
	proto.Reset(r)
	proto.Merge(r, ss.req)
	return nil
}

// streamContext has the values of the chain's context and the
// cancellation and deadline of the caller's: the chain's timeout bounds
// the opening, not the stream.
type streamContext struct {
	context.Context
	values context.Context
}

func (c streamContext) Value(key any) any { return c.values.Value(key) }

// inprocStream collects the response metadata a handler sets with
// grpc.SetHeader, grpc.SendHeader and grpc.SetTrailer, copying none of it
// (mdSet).
type inprocStream struct {
	method string

	mu              sync.Mutex
	header, trailer mdSet
}

func (s *inprocStream) Method() string { return s.method }

func (s *inprocStream) headerMD() metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.header.MD()
}

func (s *inprocStream) trailerMD() metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.trailer.MD()
}

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
