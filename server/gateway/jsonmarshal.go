package gateway

import (
	"slices"
	"sync"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/proto"
)

// protoJSON is grpc-gateway's JSON marshaler with a Marshal that encodes a
// message once. runtime.JSONPb encodes it into a slice of its own, copies
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
