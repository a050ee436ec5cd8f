package server

import (
	"fmt"
	"math"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/shebasvc/sheba/codec/protobound"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// maxItems returns the most items that the repeated field fd of a request
// message may hold, or 0 when nothing but the message's size bounds it: as
// many as a valid request can hold, which the field's constraint says
// (buf.validate's repeated.max_items); repeatedBounds reads it.
// CreateWebhookEndpointRequest's event_types lists each event type at most
// once, so it holds at most as many as there are.
func maxItems(fd protoreflect.FieldDescriptor) int {
	rules, _ := proto.GetExtension(fd.Options(), validate.E_Field).(*validate.FieldRules)
	if !rules.GetRepeated().HasMaxItems() {
		return 0
	}
	return int(min(rules.GetRepeated().GetMaxItems(), math.MaxInt32))
}

// repeatedBounds are the bounds of maxItems on the request message of every
// method, made once.
var repeatedBounds = func() *protobound.Bounds {
	var msgs []protoreflect.MessageDescriptor
	for _, m := range shebav1.Methods {
		msgs = append(msgs, m.NewRequest().ProtoReflect().Descriptor())
	}
	return protobound.New(maxItems, msgs...)
}()

// RepeatedBounds returns the bounds of the repeated fields of the request
// messages of the services, for a reader of requests outside the chain
// (the browser protocols' body reader): a message over them is neither
// unmarshalled nor handled, but refused (CheckRequest). Safe for
// concurrent use.
func RepeatedBounds() *protobound.Bounds { return repeatedBounds }

// errTooMany is the answer to a request whose repeated field holds more
// items than its bound: INVALID_ARGUMENT with the field's violation under
// its name in the proto, as validation names fields, before any other rule
// is checked.
func errTooMany(v protobound.Violation) error {
	var vs reason.Violations
	vs.Add(string(v.Field.Name()), fmt.Sprintf("must hold at most %d items", v.Max))
	return vs.Err()
}

// CheckRequest returns the answer to a request that the chain refuses
// before anything else handles it, or nil: one that Codec refused unread
// (a message over grpc.max_recv_bytes, a repeated field over its bound), or
// one decoded already (REST, whose body the gateway decodes) whose repeated
// field holds more items than its bound. The chain calls it right after
// authentication (internal/app). It allocates nothing for a request within
// its bounds.
func CheckRequest(req any) error {
	switch r := req.(type) {
	case refused:
		return r.refusal()
	case proto.Message:
		if v, over := repeatedBounds.Check(r.ProtoReflect()); over {
			return errTooMany(v)
		}
	}
	return nil
}
