package server

import (
	"fmt"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/shebasvc/sheba/interceptors/reason"
)

// Codec returns the codec of a grpc.Server on which the services are
// registered with RegisterChained (grpc.ForceServerCodecV2): grpc-go's
// proto codec, which, for a request of one of those methods, checks the
// message with its bytes in hand, decompressed, before it unmarshals it:
//
//   - a message over maxBytes bytes (grpc.max_recv_bytes; 0: no bound but
//     the server's MaxRecvMsgSize) is refused RESOURCE_EXHAUSTED
//     BODY_TOO_LARGE;
//   - one whose repeated field holds more items than its bound is refused
//     INVALID_ARGUMENT with the field's violation, found by a scan of its
//     bytes that stops at the first item over (codec/protobound).
//
// Neither refusal is an error of the codec: grpc-go answers a codec's error
// INTERNAL, and writes that answer itself, before the chain could count,
// log or complete it. The codec leaves the message unread and marks the
// request refused; RegisterChained's handler hands the chain the refusal in
// place of the message, and the chain answers it (CheckRequest), as any
// answer of the chain. Every other message decodes as grpc-go's codec
// decodes it. On the way out, an event of StreamEvents, encoded once for
// every stream (encodedMessage), is sent as its bytes.
func Codec(maxBytes int) encoding.CodecV2 {
	return &codec{
		base:     encoding.GetCodecV2(grpcproto.Name),
		maxBytes: maxBytes,
		tooLarge: reason.Error(codes.ResourceExhausted, reason.BodyTooLarge,
			fmt.Sprintf("request message larger than %d bytes (grpc.max_recv_bytes)", maxBytes)),
	}
}

type codec struct {
	base     encoding.CodecV2
	maxBytes int
	tooLarge error
}

func (c *codec) Name() string { return c.base.Name() }
func (c *codec) Marshal(v any) (mem.BufferSlice, error) {
	// A message encoded once for many streams (an event of
	// StreamEvents) is sent as it is.
	if e, ok := v.(interface{ encoded() []byte }); ok {
		return mem.BufferSlice{mem.SliceBuffer(e.encoded())}, nil
	}
	return c.base.Marshal(v)
}
func (c *codec) Unmarshal(data mem.BufferSlice, v any) error {
	t, ok := v.(decodeTarget)
	if !ok {
		return c.base.Unmarshal(data, v)
	}
	if c.maxBytes > 0 && data.Len() > c.maxBytes {
		t.refuse(c.tooLarge)
		return nil
	}
	m := t.message()
	md := m.ProtoReflect().Descriptor()
	if !repeatedBounds.Has(md) {
		return c.base.Unmarshal(data, m)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	if v, over := repeatedBounds.CheckWire(md, buf.ReadOnlyData()); over {
		t.refuse(errTooMany(v))
		return nil
	}
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

// decodeTarget is what RegisterChained's handler decodes a request into: a
// request message, which Codec may refuse instead of unmarshalling it. It
// is a proto.Message itself, with the message's own reflection, so that
// any codec (and the in-process channel's proto.Merge) decodes into the
// message.
type decodeTarget interface {
	proto.Message
	// message is the request message.
	message() proto.Message
	// refuse marks the request refused with err, its message unread.
	refuse(err error)
	// request is what the chain gets: the message, or, refused, the
	// request itself (a refused).
	request() any
}

// refused is a request that Codec refused: CheckRequest answers it.
type refused interface {
	refusal() error
}

// request is the decodeTarget of a request message: the message, and the
// refusal of a request that Codec refused unread. RegisterChained takes
// one from requests for each call and puts it back once the chain has
// answered, so that a call allocates its message alone, as grpc-go's own
// handler does.
type request struct {
	msg proto.Message
	err error
}

// requests are the requests not in use. A refused one is not put back:
// the chain has it, as the request, in its answer's path.
var requests = sync.Pool{New: func() any { return new(request) }}

func (r *request) ProtoReflect() protoreflect.Message { return r.msg.ProtoReflect() }
func (r *request) message() proto.Message             { return r.msg }
func (r *request) refuse(err error)                   { r.err = err }
func (r *request) refusal() error                     { return r.err }

func (r *request) request() any {
	if r.err != nil {
		return r
	}
	return r.msg
}

// release puts r back in requests, unless it was refused; nothing may use
// it after.
func (r *request) release() {
	if r.err != nil {
		return
	}
	r.msg = nil
	requests.Put(r)
}
