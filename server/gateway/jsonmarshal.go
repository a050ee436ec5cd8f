package gateway

import (
	"bytes"
	"io"
	"slices"
	"sync"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/proto"
)

// protoJSON is grpc-gateway's JSON marshaler with a Marshal that encodes a
// message once, and a decoder that parses a body once. runtime.JSONPb encodes it into a slice of its own, copies
// that into a bytes.Buffer and returns the buffer, each growing as it goes:
// a third of the allocations of an answer. Here protojson appends to a
// pooled buffer that has room already, and the answer is one copy of the
// bytes, of their size. Everything else is JSONPb's.
type protoJSON struct {
	*runtime.JSONPb
}

// maxPooledJSON is the largest encoding buffer kept for the next answer, so
// that one large list does not hold its buffer for good.
const maxPooledJSON = 64 << 10

var jsonBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func (j protoJSON) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return j.JSONPb.Marshal(v)
	}
	bp := jsonBuffers.Get().(*[]byte)
	b, err := j.MarshalOptions.MarshalAppend((*bp)[:0], m)
	var out []byte
	if err == nil {
		out = slices.Clone(b)
	}
	if cap(b) <= maxPooledJSON {
		*bp = b[:0]
		jsonBuffers.Put(bp)
	}
	return out, err
}

// maxPooledBody is the largest body buffer kept for the next request.
const maxPooledBody = 64 << 10

var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// NewDecoder returns a decoder that parses a message's body once.
// runtime.JSONPb's decoder scans the body's first JSON value into a
// json.RawMessage with encoding/json, then parses that again with
// protojson. Here the body is read into a pooled buffer and parsed by
// protojson alone; a body protojson refuses as a whole (not JSON, a value
// with more after it, a field it does not know) then goes JSONPb's way,
// from the buffer, so that it is answered as before, with the same error.
// A body that is empty or only white space is io.EOF, as there: a message
// with no field set.
//
// Unlike JSONPb's, it reads the whole body, where JSONPb stops after the
// first value: a value followed by more bytes than the body limit allows
// is answered 413 rather than served.
func (j protoJSON) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
		m, ok := v.(proto.Message)
		if !ok {
			return j.JSONPb.NewDecoder(r).Decode(v)
		}
		buf := bodyBuffers.Get().(*bytes.Buffer)
		defer func() {
			if buf.Cap() <= maxPooledBody {
				buf.Reset()
				bodyBuffers.Put(buf)
			}
		}()
		buf.Reset()
		if _, err := buf.ReadFrom(r); err != nil {
			return err
		}
		data := buf.Bytes()
		if len(bytes.TrimSpace(data)) == 0 {
			return io.EOF
		}
		// protojson copies what it keeps: the message holds nothing of
		// the buffer.
		if j.UnmarshalOptions.Unmarshal(data, m) == nil {
			return nil
		}
		return j.JSONPb.NewDecoder(bytes.NewReader(data)).Decode(v)
	})
}
