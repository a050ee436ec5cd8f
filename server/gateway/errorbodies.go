package gateway

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"

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
// error answers (google.rpc.Status), by the status and the media type.
// Encoding a status's google.protobuf.Any details to JSON resolves each
// detail's type and walks it by reflection: that was a third of the cost
// of a REST 400 (BenchmarkGatewayJSON, invalid-username: 235 allocations
// without the cache, 178 with it), more than the rest of the error path.
// An error seen before is answered with the bytes made the first time.
// Every other message passes through.
//
// A status is found by a hash of what its body is made of (its code,
// message, and each detail's type and wire bytes, as packed in its Any),
// and the one found is compared with it field by field, so that a hash
// that collides is a miss, never another status's body. That costs no
// allocation, where the status's deterministic wire form as the key cost
// two and a marshal.
//
// The cached slices are shared: the gateway only writes them out.
type errorBodies struct {
	runtime.Marshaler
	bodies *errorBodiesCache
}

// errorBodiesCache is the cache of error bodies the gateway's marshalers
// share.
type errorBodiesCache = lru.Cache[uint64, errorBody]

// errorBody is a body the cache holds, with the status it was made of,
// to compare.
type errorBody struct {
	st          *spb.Status
	contentType string
	body        []byte
}

// newErrorBodiesCache returns an empty cache of errorBodiesSize bodies.
func newErrorBodiesCache() (*errorBodiesCache, error) {
	return lru.New[uint64, errorBody](errorBodiesSize)
}

func newErrorBodies(m runtime.Marshaler, bodies *errorBodiesCache) errorBodies {
	return errorBodies{Marshaler: m, bodies: bodies}
}

// bodySeed seeds the hashes of statuses.
var bodySeed = maphash.MakeSeed()

func (m errorBodies) Marshal(v any) ([]byte, error) {
	st, ok := v.(*spb.Status)
	if !ok {
		return m.Marshaler.Marshal(v)
	}
	if statusSize(st) > maxCachedErrorBody {
		return m.Marshaler.Marshal(v)
	}
	contentType := m.ContentType(v)
	key := statusHash(contentType, st)
	if b, ok := m.bodies.Get(key); ok && b.contentType == contentType && sameStatus(b.st, st) {
		return b.body, nil
	}
	b, err := m.Marshaler.Marshal(v)
	if err != nil {
		return nil, err
	}
	if len(b) <= maxCachedErrorBody {
		// A copy, which no caller can change: on a miss only.
		m.bodies.Add(key, errorBody{st: proto.CloneOf(st), contentType: contentType, body: b})
	}
	return b, nil
}

// statusHash is the hash of what the body of st in contentType is made of.
func statusHash(contentType string, st *spb.Status) uint64 {
	var h maphash.Hash
	h.SetSeed(bodySeed)
	h.WriteString(contentType)
	h.WriteByte(0)
	var code [4]byte
	binary.LittleEndian.PutUint32(code[:], uint32(st.GetCode()))
	h.Write(code[:])
	h.WriteString(st.GetMessage())
	for _, d := range st.GetDetails() {
		h.WriteByte(0)
		h.WriteString(d.GetTypeUrl())
		h.WriteByte(0)
		h.Write(d.GetValue())
	}
	return h.Sum64()
}

// statusSize is the size of what st is made of, its wire form less its
// few bytes of tags and lengths.
func statusSize(st *spb.Status) int {
	n := 4 + len(st.GetMessage())
	for _, d := range st.GetDetails() {
		n += len(d.GetTypeUrl()) + len(d.GetValue())
	}
	return n
}

// sameStatus reports whether a and b have the same code, message and
// details (types and wire bytes).
func sameStatus(a, b *spb.Status) bool {
	if a.GetCode() != b.GetCode() || a.GetMessage() != b.GetMessage() || len(a.GetDetails()) != len(b.GetDetails()) {
		return false
	}
	for i, d := range a.GetDetails() {
		e := b.GetDetails()[i]
		if d.GetTypeUrl() != e.GetTypeUrl() || !bytes.Equal(d.GetValue(), e.GetValue()) {
			return false
		}
	}
	return true
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
