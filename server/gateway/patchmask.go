package gateway

import (
	"slices"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// The update mask of a PATCH (AIP-134): a REST PATCH that names no
// updateMask changes the fields its body sets. grpc-gateway infers that mask
// itself, but from the body read again as JSON, whatever its Content-Type
// (a CBOR PATCH was 400), and with every field the body names, etag and
// output-only fields included; so its inference is off
// (allow_patch_feature=false in buf.gen.yaml), and the Channel infers the
// mask from the decoded request instead, alike for JSON and CBOR.

// maskInference infers the update mask of one method's REST calls: the
// method's HTTP rule is a PATCH whose body is one message field of the
// request (the resource), and the request has a google.protobuf.FieldMask
// update_mask.
type maskInference struct {
	body, mask protoreflect.FieldDescriptor
	// fields are the fields of the resource a mask may name: all but the
	// etag (AIP-154) and those the protos mark OUTPUT_ONLY or IDENTIFIER
	// (google.api.field_behavior), which a client may send back as it read
	// them and which change nothing.
	fields []protoreflect.FieldDescriptor
}

// newMaskInference returns the inference of m's REST calls, or nil when
// its HTTP rule calls for none.
func newMaskInference(m shebav1.MethodTable) *maskInference {
	if m.HTTP.Method != "PATCH" || m.HTTP.Body == "" || m.HTTP.Body == "*" {
		return nil
	}
	fields := m.NewRequest().ProtoReflect().Descriptor().Fields()
	body := fields.ByName(protoreflect.Name(m.HTTP.Body))
	mask := fields.ByName("update_mask")
	if body == nil || body.Message() == nil || mask == nil || mask.Message() == nil ||
		mask.Message().FullName() != (&fieldmaskpb.FieldMask{}).ProtoReflect().Descriptor().FullName() {
		return nil
	}
	mi := &maskInference{body: body, mask: mask}
	resource := body.Message().Fields()
	for i := range resource.Len() {
		fd := resource.Get(i)
		behavior, _ := proto.GetExtension(fd.Options(), annotations.E_FieldBehavior).([]annotations.FieldBehavior)
		if fd.Name() == "etag" || slices.Contains(behavior, annotations.FieldBehavior_OUTPUT_ONLY) ||
			slices.Contains(behavior, annotations.FieldBehavior_IDENTIFIER) {
			continue
		}
		mi.fields = append(mi.fields, fd)
	}
	return mi
}

// infer sets req's update mask, when it has none, to the fields of its
// resource that the body set (a field holding its zero value is not set:
// name it in updateMask to clear it). A body that sets none leaves the mask
// unset, which the method answers as it answers a call without one.
func (mi *maskInference) infer(req proto.Message) {
	m := req.ProtoReflect()
	if m.Has(mi.mask) || !m.Has(mi.body) {
		return
	}
	resource := m.Get(mi.body).Message()
	var paths []string
	for _, fd := range mi.fields {
		if resource.Has(fd) {
			paths = append(paths, string(fd.Name()))
		}
	}
	if len(paths) > 0 {
		m.Set(mi.mask, protoreflect.ValueOfMessage((&fieldmaskpb.FieldMask{Paths: paths}).ProtoReflect()))
	}
}
