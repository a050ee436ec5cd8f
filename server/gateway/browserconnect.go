package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// The browser protocols by connect-go's own handlers (Options.ConnectHandlers),
// one per unary method of the method table, each calling the method over the
// Channel on the request goroutine, as a REST call does: no transcoding, and
// no grpc.Server between the HTTP request and the chain.

// message is any request or response message, as connect-go's handlers
// hold it: their message types are type parameters, and the method table's
// messages are known only as proto.Message. The codecs below read and write
// the message inside; each handler's request initializer puts a new request
// of its method there.
type message struct {
	proto.Message
	// err is the error of a request message that did not decode, which
	// the handler answers: connect-go would answer a codec's error as its
	// own, without the ErrorInfo.
	err error
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

func (protoCodec) Unmarshal(data []byte, v any) error {
	m, err := protoMessage(v)
	if err != nil {
		return err
	}
	if err := proto.Unmarshal(data, m); err != nil {
		// The body was decoded before (browser.body), so this is not
		// expected; answered as that would.
		badRequest(v, malformed(reason.Clip(reason.ValidUTF8(fmt.Sprintf("the request body is not a %s message: %v", m.ProtoReflect().Descriptor().FullName(), err)))))
	}
	return nil
}

// jsonMessageCodec is connect-go's JSON codec for message, with the shape of
// the REST JSON (defaults shown, unknown fields refused), whose decoding
// errors are the client's INVALID_ARGUMENT MALFORMED_BODY.
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

func (jsonMessageCodec) Unmarshal(data []byte, v any) error {
	m, err := protoMessage(v)
	if err != nil {
		return err
	}
	if err := browserUnmarshal.Unmarshal(data, m); err != nil {
		badRequest(v, malformed(reason.Clip(reason.ValidUTF8(err.Error()))))
	}
	return nil
}

// badRequest records err as the answer to the request v, when v is a
// message; a codec's error would reach the client without its ErrorInfo.
func badRequest(v any, err error) {
	if m, ok := v.(*message); ok {
		m.err = err
	}
}

// newConnectHandlers returns connect-go's handler of every unary method of
// services, by full method name, each calling it over conn.
func newConnectHandlers(conn *Channel, services []*shebav1.ServiceTable) map[string]http.Handler {
	handlers := map[string]http.Handler{}
	for _, svc := range services {
		for _, m := range svc.Methods {
			if m.ServerStreams {
				continue
			}
			full, newRequest := m.FullName, m.NewRequest
			handlers[full] = connect.NewUnaryHandler(full,
				func(ctx context.Context, req *connect.Request[message]) (*connect.Response[message], error) {
					if err := req.Msg.err; err != nil {
						// Refused before the chain, as the body's
						// other errors are (browser.body).
						return nil, connectError(complete(err).GRPCStatus())
					}
					out, header, trailer, err := conn.call(ctx, full, req.Msg.Message)
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
				connect.WithRequestInitializer(func(_ connect.Spec, v any) error {
					v.(*message).Message = newRequest()
					return nil
				}),
				connect.WithCodec(protoCodec{}),
				connect.WithCodec(jsonMessageCodec{}),
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

// call calls unary method with req over c, on the caller's goroutine, as
// Invoke does, and returns the handler's own answer (not a copy) and the
// call's response metadata. ctx is a browser request's: its headers and
// client address make the call's metadata, as a REST request's do.
func (c *Channel) call(ctx context.Context, method string, req proto.Message) (proto.Message, metadata.MD, metadata.MD, error) {
	m, ok := c.methods[method]
	if !ok {
		return nil, nil, nil, status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	md, room := incomingMetadata(ctx)
	sctx, stream := newCallContext(ctx, method, md, room)
	if rc, ok := ctx.Value(restCallKey{}).(*restCall); ok && rc.browser {
		// Not an in-process call: a browser's, whose peer is the client.
		if c, ok := sctx.(*callContext); ok {
			c.peer = &rc.peer
		} else {
			sctx = peer.NewContext(context.WithValue(sctx, inprocKey{}, nil), &rc.peer)
		}
	}
	decode := func(in any) error {
		proto.Merge(in.(proto.Message), req)
		return nil
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
func browserCall(r *http.Request) context.Context {
	rc := &restCall{Context: r.Context(), header: r.Header, browser: true}
	rc.peer.Addr = clientAddr(r.RemoteAddr)
	return rc
}

// clientAddr is the address of an HTTP client, as net/http gives it.
type clientAddr string

func (clientAddr) Network() string  { return "tcp" }
func (a clientAddr) String() string { return string(a) }

var _ net.Addr = clientAddr("")
