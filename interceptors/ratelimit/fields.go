package ratelimit

import (
	"context"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/shebasvc/sheba/interceptors/callinfo"
)

// Response metadata keys of the RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers-11; the REST gateway sends them as
// the RateLimit-Policy and RateLimit headers.
const (
	PolicyKey = "ratelimit-policy"
	StateKey  = "ratelimit"
)

// tighter reports whether a is the tighter limit: a refusal first, then
// fewer remaining calls, then a longer wait until the quota is back.
func tighter(a, b Decision) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return a.Reset > b.Reset
}

// send sets the fields of decision d of policy p as response metadata;
// none for a nil p (no limit applied).
func send(ctx context.Context, p *policyName, d Decision) {
	if p == nil {
		return
	}
	policy := p.field(d.Policy)
	if ci := callinfo.FromContext(ctx); ci != nil {
		// Whoever made the Info sends them with the rest; the RateLimit
		// field is made in its memory.
		ci.SetHeader(PolicyKey, policy)
		ci.SetHeader(StateKey, ci.String(appendState(ci.Buffer(), p.quoted, d)))
		return
	}
	// Fails only outside a server call (a direct test call).
	_ = grpc.SetHeader(ctx, metadata.Pairs(PolicyKey, policy, StateKey, string(appendState(nil, p.quoted, d))))
}

// policyName is the name of a limit's policy, and the RateLimit-Policy
// fields of the policies its limiter answered so far: a limiter answers
// with a few (anonymous callers and API keys may have their own), the same
// on nearly every call, so each is made once rather than on each call.
type policyName struct {
	name   string
	quoted []byte
	// fields maps a Policy to its field; it is never changed once
	// stored, only replaced by a copy with one more (a few policies).
	fields atomic.Pointer[map[Policy]string]
	mu     sync.Mutex
}

func newPolicyName(name string) *policyName {
	p := &policyName{name: name, quoted: strconv.AppendQuote(nil, name)}
	p.fields.Store(&map[Policy]string{})
	return p
}

// field returns the RateLimit-Policy field of policy q.
func (p *policyName) field(q Policy) string {
	if f, ok := (*p.fields.Load())[q]; ok {
		return f
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	old := *p.fields.Load()
	if f, ok := old[q]; ok {
		return f
	}
	f := string(appendPolicy(nil, p.quoted, q))
	next := maps.Clone(old)
	next[q] = f
	p.fields.Store(&next)
	return f
}

// Fields returns the values of the RateLimit-Policy and RateLimit fields
// for decision d of the policy called name, for example
//
//	"key";q=50;w=1
//	"key";r=49;t=1
func Fields(name string, d Decision) (policy, current string) {
	quoted := strconv.AppendQuote(nil, name)
	return string(appendPolicy(nil, quoted, d.Policy)), string(appendState(nil, quoted, d))
}

// appendPolicy appends the RateLimit-Policy field of policy q, named
// quoted (a quoted string), to b.
func appendPolicy(b, quoted []byte, q Policy) []byte {
	b = append(b, quoted...)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, int64(q.Quota), 10)
	b = append(b, ";w="...)
	return strconv.AppendInt(b, Seconds(q.Window), 10)
}

// appendState appends the RateLimit field of decision d of the policy
// named quoted to b.
func appendState(b, quoted []byte, d Decision) []byte {
	b = append(b, quoted...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, int64(max(0, d.Remaining)), 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, Seconds(d.Reset), 10)
}
