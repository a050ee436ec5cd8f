package protovalidate

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	pv "buf.build/go/protovalidate"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/shebasvc/sheba/interceptors/reason"
)

// UnaryServerInterceptor returns the link that checks each request with v
// (built once, pv.New) and answers an invalid one as Check does, before
// the handler runs.
func UnaryServerInterceptor(v pv.Validator, opts ...Option) grpc.UnaryServerInterceptor {
	o := evaluateOptions(opts)
	o.answers = &answers{}
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := check(ctx, v, req, o); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// Check returns nil when req, a request message, holds to its constraints,
// else the answer to it: InvalidArgument with its field violations, or
// Internal when v fails otherwise. The hook checks the request it is given
// in place of a call's with it.
func Check(ctx context.Context, v pv.Validator, req proto.Message, opts ...Option) error {
	return check(ctx, v, req, evaluateOptions(opts))
}

var errNotMessage = errors.New("protovalidate: the request is not a proto message")

func check(ctx context.Context, v pv.Validator, req any, o *options) error {
	msg, ok := req.(proto.Message)
	if !ok {
		return reason.Answer(ctx, o.log, "validate request", errNotMessage, reason.Own{})
	}
	err := v.Validate(msg)
	if err == nil {
		return nil
	}
	var invalid *pv.ValidationError
	if !errors.As(err, &invalid) {
		// A message the validator was not built for, or a rule it cannot
		// evaluate: the server's fault, logged as such.
		return reason.Answer(ctx, o.log, "validate request", err, reason.Own{})
	}
	return answer(invalid.Violations, o.answers)
}

// violation is one field violation as sheba names it: the path of the
// field (numbers and, for an item, its index; -1 otherwise) to order it
// by, its name and the description.
type violation struct {
	path        []pathElement
	field       string
	description string
}

type pathElement struct {
	number int32
	index  int64
}

// answer returns the InvalidArgument answer to vs: one violation per field,
// in the order of the fields in the message (items by index), the first
// rule each field breaks; the one made before for the same violations when
// cache (nil: none) holds it.
func answer(vs []*pv.Violation, cache *answers) error {
	out := make([]violation, 0, len(vs))
	for _, v := range vs {
		base := v.Proto.GetField().GetElements()
		if v.Proto.GetRuleId() == "repeated.unique" && v.FieldValue.IsValid() {
			// protovalidate names the list; sheba names each item that
			// repeats an earlier one.
			for _, i := range repeats(v.FieldValue.List()) {
				out = append(out, newViolation(base, int64(i), v.Proto.GetMessage()))
			}
			continue
		}
		out = append(out, newViolation(base, -1, v.Proto.GetMessage()))
	}
	slices.SortStableFunc(out, func(a, b violation) int {
		return slices.CompareFunc(a.path, b.path, func(x, y pathElement) int {
			return cmp.Or(cmp.Compare(x.number, y.number), cmp.Compare(x.index, y.index))
		})
	})
	// The first violation of each field, in place.
	kept := out[:0]
	for _, v := range out {
		if len(kept) > 0 && v.field == kept[len(kept)-1].field {
			continue
		}
		kept = append(kept, v)
	}
	var buf [256]byte
	key := answerKey(buf[:0], kept)
	if err := cache.get(key); err != nil {
		return err
	}
	var answer reason.Violations
	for _, v := range kept {
		answer.Add(v.field, v.description)
	}
	err := answer.Err()
	cache.add(key, err)
	return err
}

// answerKey appends to b what the answer to the violations vs is made of:
// each one's field and description.
func answerKey(b []byte, vs []violation) []byte {
	for _, v := range vs {
		b = append(b, v.field...)
		b = append(b, 0)
		b = append(b, v.description...)
		b = append(b, 0)
	}
	return b
}

// answers holds the answers made to invalid requests, by their violations
// (answerKey), to hand the same error to every request that breaks the same
// rules: the status with its ErrorInfo and BadRequest built, the details
// packed in their Any and the message formatted once, not on every call,
// where they cost 22 of the 126 allocations of a REST 400
// (internal/app BenchmarkGatewayJSON/invalid-username) and more CPU than
// the validation itself. An answer is immutable (a *reason.StatusError) and
// so shared by the calls, whatever each step downstream reads of it.
//
// Its size is bounded whatever callers send: at most maxAnswers answers
// with keys of at most maxAnswerKey bytes; when it is full it starts over.
// The descriptions are the rules' own messages, which quote the rule, not
// the value sent, so the answers clients cause are a few, one for each set
// of rules broken together. It is safe for concurrent use.
type answers struct {
	mu sync.RWMutex
	m  map[string]error
}

const (
	maxAnswers   = 64
	maxAnswerKey = 1 << 10
)

// get returns the answer of key, nil if c (or nil c) has none.
func (c *answers) get(key []byte) error {
	if c == nil {
		return nil
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.m[string(key)]
}

// add records err as the answer of key.
func (c *answers) add(key []byte, err error) {
	if c == nil || len(key) > maxAnswerKey {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxAnswers {
		c.m = make(map[string]error, maxAnswers)
	}
	c.m[string(key)] = err
}

// newViolation is the violation of the field at path elems, or of its item
// index if index is not -1.
func newViolation(elems []*validate.FieldPathElement, index int64, description string) violation {
	v := violation{path: make([]pathElement, 0, len(elems)+1), description: description}
	var name strings.Builder
	for i, e := range elems {
		if i > 0 {
			name.WriteByte('.')
		}
		name.WriteString(e.GetFieldName())
		p := pathElement{number: e.GetFieldNumber(), index: -1}
		switch e.WhichSubscript() {
		case validate.FieldPathElement_Index_case:
			p.index = int64(e.GetIndex())
			name.WriteString("[" + strconv.FormatUint(e.GetIndex(), 10) + "]")
		case validate.FieldPathElement_Subscript_not_set_case:
		default:
			// A map key: sheba's requests have no maps; named as
			// protovalidate names it.
			name.Reset()
			name.WriteString(pv.FieldPathString(validate.FieldPath_builder{Elements: elems[:i+1]}.Build()))
		}
		v.path = append(v.path, p)
	}
	if index >= 0 {
		v.path[len(v.path)-1].index = index
		name.WriteString("[" + strconv.FormatInt(index, 10) + "]")
	}
	v.field = name.String()
	return v
}

// repeats returns the indexes of the items of list equal to an earlier
// one.
func repeats(list protoreflect.List) []int {
	var out []int
	seen := make(map[any]bool, list.Len())
	for i := range list.Len() {
		key := list.Get(i).Interface()
		if b, ok := key.([]byte); ok {
			key = string(b)
		}
		if seen[key] {
			out = append(out, i)
		}
		seen[key] = true
	}
	return out
}
