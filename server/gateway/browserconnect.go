package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/interceptors/tracing"
)

// The browser protocols by connect-go's own handlers (Options.ConnectHandlers),
// one per unary method of the method table, each calling the method over the
// Channel on the request goroutine, as a REST call does: no transcoding, and
// no grpc.Server between the HTTP request and the chain.

// message is a request or response message as connect-go's handlers
// hold it (their message types are type parameters; the method table's
// messages are known only as proto.Message): an answer's message, which
// the codecs below encode, or a request's body, which they keep as it is
// for the call to decode into the request the chain gets (Channel.call),
// as a grpc.Server's codec decodes a gRPC call's.
type message struct {
	proto.Message
	// data is a request's message, as sent (uncompressed), in JSON when
	// json is set, else in protobuf.
	data []byte
	json bool
}

// protoMessage is v as a protobuf message: the one a message holds, or v
// itself (connect-go's own messages, such as an error's details).
func protoMessage(v any) (proto.Message, error) {
	switch m := v.(type) {
	case *message:
		return m.Message, nil
	case proto.Message:
		return m, nil
	}
	return nil, fmt.Errorf("%T is not a protobuf message", v)
}

// keep keeps data in v, a request's message, unread.
func keep(data []byte, v any, json bool) error {
	m, ok := v.(*message)
	if !ok {
		return fmt.Errorf("%T is not a request message", v)
	}
	// connect-go reuses its buffer once this returns.
	m.data, m.json = append(m.data[:0], data...), json
	return nil
}

// protoCodec is connect-go's protobuf codec for message.
type protoCodec struct{}

func (protoCodec) Name() string { return "proto" }

func (c protoCodec) Marshal(v any) ([]byte, error) { return c.MarshalAppend(nil, v) }

func (protoCodec) MarshalAppend(dst []byte, v any) ([]byte, error) {
	m, err := protoMessage(v)
	if err != nil {
		return nil, err
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, m)
}

func (protoCodec) Unmarshal(data []byte, v any) error { return keep(data, v, false) }

// jsonMessageCodec is connect-go's JSON codec for message, with the shape of
// the REST JSON: defaults shown, unknown fields refused (decodeJSON).
type jsonMessageCodec struct{}

var (
	browserMarshal   = protojson.MarshalOptions{EmitDefaultValues: true}
	browserUnmarshal = protojson.UnmarshalOptions{}
)

func (jsonMessageCodec) Name() string { return "json" }

func (c jsonMessageCodec) Marshal(v any) ([]byte, error) { return c.MarshalAppend(nil, v) }

func (jsonMessageCodec) MarshalAppend(dst []byte, v any) ([]byte, error) {
	m, err := protoMessage(v)
	if err != nil {
		return nil, err
	}
	return browserMarshal.MarshalAppend(dst, m)
}

func (jsonMessageCodec) Unmarshal(data []byte, v any) error { return keep(data, v, true) }

// decodeJSON decodes data into m, or returns the client's error:
// INVALID_ARGUMENT MALFORMED_BODY, quoting at most reason.MaxQuoted bytes.
func decodeJSON(data []byte, m proto.Message) error {
	if err := browserUnmarshal.Unmarshal(data, m); err != nil {
		return complete(malformed(reason.Clip(reason.ValidUTF8(err.Error()))))
	}
	return nil
}

// newConnectHandlers returns connect-go's handler of every unary method of
// services, by full method name, each calling it over conn.
func newConnectHandlers(conn *Channel, services []*shebav1.ServiceTable, codec encoding.CodecV2, spans *tracing.ServerHandler, compressMinBytes int) map[string]http.Handler {
	handlers := map[string]http.Handler{}
	for _, svc := range services {
		for _, m := range svc.Methods {
			if m.ServerStreams {
				continue
			}
			full := m.FullName
			handlers[full] = connect.NewUnaryHandler(full,
				func(ctx context.Context, req *connect.Request[message]) (*connect.Response[message], error) {
					out, header, trailer, err := conn.call(ctx, full, req.Msg, codec)
					if spans != nil {
						// The call's span gets its outcome, as the
						// grpc.Server's stats handler gives it.
						spans.HandleRPC(ctx, &stats.End{Error: err})
					}
					if err != nil {
						ce := connectError(status.Convert(err))
						addMetadata(ce.Meta(), header)
						addMetadata(ce.Meta(), trailer)
						return nil, ce
					}
					resp := connect.NewResponse(&message{Message: out})
					addMetadata(resp.Header(), header)
					addMetadata(resp.Trailer(), trailer)
					return resp, nil
				},
				connect.WithCodec(protoCodec{}),
				connect.WithCodec(jsonMessageCodec{}),
				// A browser accepts gzip on every call: a small answer
				// is sent as it is, as REST's is.
				connect.WithCompressMinBytes(compressMinBytes),
			)
		}
	}
	return handlers
}

// addMetadata adds the response metadata md to h, as grpc-go writes it.
func addMetadata(h http.Header, md metadata.MD) {
	for k, vs := range md {
		if strings.HasPrefix(k, ":") || strings.HasPrefix(k, "grpc-") {
			continue
		}
		name := http.CanonicalHeaderKey(k)
		for _, v := range vs {
			if strings.HasSuffix(k, "-bin") {
				v = connect.EncodeBinaryHeader([]byte(v))
			}
			h.Add(name, v)
		}
	}
}

// call calls unary method over c with the request req holds, on the
// caller's goroutine, as Invoke does, and returns the handler's own answer
// (not a copy) and the call's response metadata. The request is decoded
// into the message the chain gets: JSON here, protobuf by codec (the
// grpc.Server's, server.Codec, which refuses a repeated field over its
// bound unread, for the chain to answer). ctx is a browser request's
// (browserCall): its headers make the call's metadata, as a REST
// request's do, and its client is the call's peer.
func (c *Channel) call(ctx context.Context, method string, req *message, codec encoding.CodecV2) (proto.Message, metadata.MD, metadata.MD, error) {
	m, ok := c.methods[method]
	if !ok {
		return nil, nil, nil, status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	md, room := incomingMetadata(ctx)
	sctx, stream := newCallContext(ctx, method, md, room)
	decode := func(in any) error {
		if req.json {
			return decodeJSON(req.data, in.(proto.Message))
		}
		return codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(req.data)}, in)
	}
	out, err := m.handler(m.impl, sctx, decode, c.interceptor)
	header, trailer := stream.headerMD(), stream.trailerMD()
	if err != nil {
		return nil, header, trailer, err
	}
	if out == nil {
		return nil, header, trailer, status.Error(codes.Internal, "handler returned neither a response nor an error")
	}
	return out.(proto.Message), header, trailer, nil
}

// browserCall returns the context of the browser call r, as the Channel
// reads it: its headers, and its client as the call's peer.
func browserCall(r *http.Request, allHeaders bool) context.Context {
	rc := &restCall{Context: r.Context(), header: r.Header, browser: true, allHeaders: allHeaders}
	rc.peer.Addr = clientAddr(r.RemoteAddr)
	return rc
}

// clientAddr is the address of an HTTP client, as net/http gives it.
type clientAddr string

func (clientAddr) Network() string  { return "tcp" }
func (a clientAddr) String() string { return string(a) }

var _ net.Addr = clientAddr("")

// browserSpans starts the span of a browser call served by connect-go's
// handlers, as the grpc.Server's stats handler starts a gRPC call's (the
// span named by the method, a child of the W3C Trace Context the request
// carries); the handler ends it with the call's outcome, and a call that
// never reaches it ends it when answered.
type browserSpans struct {
	handler *tracing.ServerHandler
	prop    propagation.TextMapPropagator
}

func newBrowserSpans(tp trace.TracerProvider) *browserSpans {
	if tp == nil {
		return nil
	}
	return &browserSpans{handler: tracing.NewServerHandler(tp),
		prop: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}
}

// start returns r in the context of its call's span, and the function that
// ends the span.
func (s *browserSpans) start(r *http.Request) (*http.Request, func()) {
	ctx := s.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx = s.handler.TagRPC(ctx, &stats.RPCTagInfo{FullMethodName: r.URL.Path})
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		if addr, ok := ctx.Value(http.LocalAddrContextKey).(net.Addr); ok {
			s.handler.HandleRPC(ctx, &stats.InHeader{LocalAddr: addr})
		}
	}
	return r.WithContext(ctx), func() { span.End() }
}
