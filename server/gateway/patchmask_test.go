package gateway

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// patchRequest is the descriptor of an AIP-134 update request of a
// resource with two writable fields (name, note), an etag and an
// output-only field, made here so that the inference is tested on more
// than the one PATCH the API has.
func patchRequest(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	outputOnly := &descriptorpb.FieldOptions{}
	proto.SetExtension(outputOnly, annotations.E_FieldBehavior, []annotations.FieldBehavior{annotations.FieldBehavior_OUTPUT_ONLY})
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	msg := descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	fd := &descriptorpb.FileDescriptorProto{
		Name:       proto.String("patchtest.proto"),
		Package:    proto.String("patchtest"),
		Syntax:     proto.String("proto3"),
		Dependency: []string{"google/protobuf/field_mask.proto", "google/api/field_behavior.proto"},
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Thing"),
			Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("id"), JsonName: proto.String("id"), Number: proto.Int32(1), Type: str, Label: opt, Options: outputOnly},
				{Name: proto.String("name"), JsonName: proto.String("name"), Number: proto.Int32(2), Type: str, Label: opt},
				{Name: proto.String("note"), JsonName: proto.String("note"), Number: proto.Int32(3), Type: str, Label: opt},
				{Name: proto.String("etag"), JsonName: proto.String("etag"), Number: proto.Int32(4), Type: str, Label: opt},
			},
		}, {
			Name: proto.String("UpdateThingRequest"),
			Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("thing"), JsonName: proto.String("thing"), Number: proto.Int32(1), Type: msg, Label: opt, TypeName: proto.String(".patchtest.Thing")},
				{Name: proto.String("update_mask"), JsonName: proto.String("updateMask"), Number: proto.Int32(2), Type: msg, Label: opt, TypeName: proto.String(".google.protobuf.FieldMask")},
			},
		}},
	}
	f, err := protodesc.NewFile(fd, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	return f.Messages().ByName("UpdateThingRequest")
}

// TestMaskInference checks the update mask a PATCH without one gets: the
// writable fields its body sets, never the etag or an output-only field;
// none when the body sets none, and the caller's own mask untouched.
func TestMaskInference(t *testing.T) {
	md := patchRequest(t)
	method := func(verb, body string) shebav1.MethodTable {
		return shebav1.MethodTable{
			NewRequest: func() proto.Message { return dynamicpb.NewMessage(md) },
			HTTP:       shebav1.HTTPRule{Method: verb, Path: "/v1/things/{thing.id}", Body: body},
		}
	}
	for _, m := range []shebav1.MethodTable{method("POST", "thing"), method("PATCH", "*"), method("PATCH", "")} {
		if newMaskInference(m) != nil {
			t.Errorf("%s with body %q: an inference, want none", m.HTTP.Method, m.HTTP.Body)
		}
	}
	mi := newMaskInference(method("PATCH", "thing"))
	if mi == nil {
		t.Fatal("PATCH with body thing: no inference")
	}
	thing := md.Fields().ByName("thing")
	mask := md.Fields().ByName("update_mask")
	for _, test := range []struct {
		name  string
		set   map[string]string // fields of the thing the body sets
		given []string          // the caller's mask, if any
		want  []string          // nil: no mask
	}{
		{"one field", map[string]string{"name": "a"}, nil, []string{"name"}},
		{"both, etag and id ignored", map[string]string{"id": "x", "name": "a", "note": "b", "etag": "e"}, nil, []string{"name", "note"}},
		{"only what cannot change", map[string]string{"id": "x", "etag": "e"}, nil, nil},
		{"the caller's mask", map[string]string{"name": "a", "note": "b"}, []string{"note"}, []string{"note"}},
	} {
		t.Run(test.name, func(t *testing.T) {
			req := dynamicpb.NewMessage(md)
			res := req.Mutable(thing).Message()
			for name, v := range test.set {
				res.Set(res.Descriptor().Fields().ByName(protoreflect.Name(name)), protoreflect.ValueOfString(v))
			}
			if test.given != nil {
				req.Set(mask, protoreflect.ValueOfMessage((&fieldmaskpb.FieldMask{Paths: test.given}).ProtoReflect()))
			}
			mi.infer(req)
			var got []string
			if req.Has(mask) {
				got = req.Get(mask).Message().Interface().(*fieldmaskpb.FieldMask).GetPaths()
			}
			if diff := cmp.Diff(test.want, got); diff != "" {
				t.Errorf("mask (-want +got):\n%s", diff)
			}
		})
	}
	req := dynamicpb.NewMessage(md)
	mi.infer(req)
	if req.Has(mask) {
		t.Errorf("no body: got a mask, want none")
	}
}
