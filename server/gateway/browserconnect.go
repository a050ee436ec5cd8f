package gateway

import (
	"context"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
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
}

// protoCodec is connect-go's protobuf codec for message.
type protoCodec struct{}

func (protoCodec) Name() string { return "proto" }

func (protoCodec) Marshal(v any) ([]byte, error) { return proto.Marshal(v.(*message).Message) }

func (protoCodec) MarshalAppend(dst []byte, v any) ([]byte, error) {
	return proto.MarshalOptions{}.MarshalAppend(dst, v.(*message).Message)
}

func (protoCodec) Unmarshal(data []byte, v any) error {
	return proto.Unmarshal(data, v.(*message).Message)
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

func (jsonMessageCodec) Marshal(v any) ([]byte, error) {
	return browserMarshal.Marshal(v.(*message).Message)
}

func (jsonMessageCodec) MarshalAppend(dst []byte, v any) ([]byte, error) {
	return browserMarshal.MarshalAppend(dst, v.(*message).Message)
}

func (jsonMessageCodec) Unmarshal(data []byte, v any) error {
	if err := browserUnmarshal.Unmarshal(data, v.(*message).Message); err != nil {
		return connectError(status.Convert(reason.Error(codes.InvalidArgument, reason.MalformedBody, reason.Clip(reason.ValidUTF8(err.Error())))))
	}
	return nil
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
					out, header, trailer, err := conn.call(ctx, full, req.Msg.Message)
					if err != nil {
						ce := connectError(status.Convert(err))
						addMetadata(ce.Meta(), header)
						addMetadata(ce.Meta(), trailer)
						return nil, ce
					}
					resp := connect.NewResponse(&message{out})
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
