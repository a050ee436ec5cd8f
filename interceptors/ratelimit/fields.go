package ratelimit

import (
	"context"
	"strconv"
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
	policy, current := p.fields(d)
	if ci := callinfo.FromContext(ctx); ci != nil {
		// The outermost step sends them with the rest.
		ci.SetHeader(PolicyKey, policy)
		ci.SetHeader(StateKey, current)
		return
	}
	// Fails only outside a server call (a direct test call).
	_ = grpc.SetHeader(ctx, metadata.Pairs(PolicyKey, policy, StateKey, current))
}

// policyName is the name of a limit's policy, and the RateLimit-Policy
// field of the policy its limiter answered last: the same on nearly every
// call, so made once rather than on each (Fields).
type policyName struct {
	name   string
	quoted []byte
	last   atomic.Pointer[policyField]
}

type policyField struct {
	policy Policy
	field  string
}

func newPolicyName(name string) *policyName {
	return &policyName{name: name, quoted: strconv.AppendQuote(nil, name)}
}

// fields returns what Fields returns for decision d.
func (p *policyName) fields(d Decision) (policy, current string) {
	last := p.last.Load()
	if last == nil || last.policy != d.Policy {
		policy, _ = Fields(p.name, d)
		last = &policyField{policy: d.Policy, field: policy}
		p.last.Store(last)
	}
	var buf [64]byte
	b := append(buf[:0], p.quoted...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, int64(max(0, d.Remaining)), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, Seconds(d.Reset), 10)
	return last.field, string(b)
}

// Fields returns the values of the RateLimit-Policy and RateLimit fields
// for decision d of the policy called name, for example
//
//	"key";q=50;w=1
//	"key";r=49;t=1
func Fields(name string, d Decision) (policy, current string) {
	// Both fields are made in one buffer and cut from one string: one
	// allocation per call, on every call of the chain.
	var buf [128]byte
	b := buf[:0]
	b = strconv.AppendQuote(b, name)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, int64(d.Policy.Quota), 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, Seconds(d.Policy.Window), 10)
	cut := len(b)
	b = strconv.AppendQuote(b, name)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, int64(max(0, d.Remaining)), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, Seconds(d.Reset), 10)
	s := string(b)
	return s[:cut], s[cut:]
}
