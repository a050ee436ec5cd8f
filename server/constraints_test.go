package server_test

import (
	"os"
	"testing"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/descriptorpb"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/server"
)

// TestValidateProtoIsTheRuntimes checks that the buf/validate/validate.proto
// the protos are compiled against (scripts/protodeps.sh pins it; make
// generate writes it, compiled, into gen/sheba.binpb) is the one whose
// descriptor buf.build/go/protovalidate's Go types register: a newer file
// could declare rules that the runtime reads as unknown fields, and skips
// without a word. Source info and unknown fields (buf's own) do not count.
func TestValidateProtoIsTheRuntimes(t *testing.T) {
	b, err := os.ReadFile("../gen/sheba.binpb")
	if err != nil {
		t.Fatalf("the descriptor set of make generate: %v", err)
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &set); err != nil {
		t.Fatalf("gen/sheba.binpb: %v", err)
	}
	want := protodesc.ToFileDescriptorProto(validate.File_buf_validate_validate_proto)
	var got *descriptorpb.FileDescriptorProto
	for _, f := range set.GetFile() {
		if f.GetName() == want.GetName() {
			got = f
		}
	}
	if got == nil {
		t.Fatalf("gen/sheba.binpb holds no %s", want.GetName())
	}
	for _, f := range []*descriptorpb.FileDescriptorProto{got, want} {
		f.SourceCodeInfo = nil
		clearUnknown(f.ProtoReflect())
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("%s compiled for proto/ differs from the runtime's (-runtime +compiled):\n%s", want.GetName(), diff)
	}
}

// clearUnknown drops the unknown fields of m and of every message in it.
func clearUnknown(m protoreflect.Message) {
	m.SetUnknown(nil)
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				clearUnknown(v.List().Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, v protoreflect.Value) bool {
				clearUnknown(v.Message())
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			clearUnknown(v.Message())
		}
		return true
	})
}

// TestEventTypesConstraint checks that the event types an endpoint may ask
// for, and a stream may be filtered by, are said alike in Go (EventTypes)
// and in the constraints of CreateWebhookEndpointRequest.event_types and
// StreamEventsRequest.event_types, which the chain enforces: the same
// list, and at most as many items as there are types.
func TestEventTypesConstraint(t *testing.T) {
	for _, msg := range []proto.Message{&shebav1.CreateWebhookEndpointRequest{}, &shebav1.StreamEventsRequest{}} {
		fd := msg.ProtoReflect().Descriptor().Fields().ByName("event_types")
		rules := proto.GetExtension(fd.Options(), validate.E_Field).(*validate.FieldRules).GetRepeated()
		if diff := cmp.Diff(server.EventTypes(), rules.GetItems().GetString().GetIn()); diff != "" {
			t.Errorf("%s's items.string.in (-EventTypes +constraint):\n%s", fd.FullName(), diff)
		}
		if got, want := rules.GetMaxItems(), uint64(len(server.EventTypes())); got != want || !rules.GetUnique() {
			t.Errorf("%s: max_items %d, unique %t; want %d (one of each type), true", fd.FullName(), got, rules.GetUnique(), want)
		}
	}
}
