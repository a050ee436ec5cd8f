package gateway

import (
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	lru "github.com/hashicorp/golang-lru/v2"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
)

// The error bodies cache holds small bodies only, so that what it holds is
// bounded in bytes whatever callers send: errorBodiesSize entries of at
// most maxCachedErrorBody bytes each, key and body, 128 KiB in all. The
// errors clients cause over and over (a field's rule, a limit, a missing
// key, the shedding) are a few dozen bodies of a few hundred bytes; a
// larger one is made each time. Only errors free of request text reach it
// (errorHandler answers the others with the marshaler beneath, uncached):
// a cache keyed by statuses that quote the request would grow with the
// variety of what is sent, and held a megabyte per entry when a request's
// unknown field name was a megabyte long.
const (
	maxCachedErrorBody = 1 << 10
	errorBodiesSize    = 64
)

// errorBodies is a runtime.Marshaler that remembers the bodies it made for
// error answers (google.rpc.Status), keyed by the status's deterministic
// wire form and the media type. Encoding a status's google.protobuf.Any
// details to JSON resolves each detail's type and walks it by reflection:
// that was a third of the cost of a REST 400 (BenchmarkGatewayJSON,
// invalid-username: 235 allocations without the cache, 178 with it), more
// than the rest of the error path. The wire form of the same status costs a
// fraction of that, so an error seen before is answered with the bytes made
// the first time. Every other message passes through.
//
// The cached slices are shared: the gateway only writes them out.
type errorBodies struct {
	runtime.Marshaler
	bodies *lru.Cache[string, []byte]
}

func newErrorBodies(m runtime.Marshaler, bodies *lru.Cache[string, []byte]) errorBodies {
	return errorBodies{Marshaler: m, bodies: bodies}
}

func (m errorBodies) Marshal(v any) ([]byte, error) {
	st, ok := v.(*spb.Status)
	if !ok {
		return m.Marshaler.Marshal(v)
	}
	wire, err := proto.MarshalOptions{Deterministic: true}.Marshal(st)
	if err != nil || len(wire) > maxCachedErrorBody {
		return m.Marshaler.Marshal(v)
	}
	key := m.ContentType(v) + "\x00" + string(wire)
	if b, ok := m.bodies.Get(key); ok {
		return b, nil
	}
	b, err := m.Marshaler.Marshal(v)
	if err != nil {
		return nil, err
	}
	if len(b) <= maxCachedErrorBody {
		m.bodies.Add(key, b)
	}
	return b, nil
}

// uncached returns the marshaler beneath the error bodies cache of m (a
// markingMarshaler, as the mux hands them out), or m itself if it has none.
func uncached(m runtime.Marshaler) runtime.Marshaler {
	if mm, ok := m.(markingMarshaler); ok {
		m = mm.Marshaler
	}
	if eb, ok := m.(errorBodies); ok {
		return eb.Marshaler
	}
	return m
}
