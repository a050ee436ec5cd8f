package gateway

import (
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	lru "github.com/hashicorp/golang-lru/v2"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
)

// errorBodiesSize bounds the cached error bodies. The errors clients cause
// over and over (a field's rule, a limit, a missing key) are a few dozen;
// the rest (a message that names a resource id) come and go in the LRU.
const errorBodiesSize = 512

// errorBodies is a runtime.Marshaler that remembers the bodies it made for
// error answers (google.rpc.Status), keyed by the status's deterministic
// wire form and the media type. Encoding a status's google.protobuf.Any
// details to JSON resolves each detail's type and walks it by reflection:
// that was a third of the cost of a REST 400 (BenchmarkGatewayJSON,
// invalid-username), more than the rest of the error path. The wire form of
// the same status costs a fraction of that, so an error seen before is
// answered with the bytes made the first time. Every other message passes
// through.
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
	if err != nil {
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
	m.bodies.Add(key, b)
	return b, nil
}
