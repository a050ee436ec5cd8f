package protobound_test

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/shebasvc/sheba/codec/protobound"
)

func Example() {
	mask := (&fieldmaskpb.FieldMask{}).ProtoReflect().Descriptor()
	bounds := protobound.New(func(fd protoreflect.FieldDescriptor) int {
		if fd.Name() == "paths" {
			return 2
		}
		return 0 // no bound
	}, mask)

	// A million paths on the wire: refused at the third, unread.
	wire, _ := proto.Marshal(&fieldmaskpb.FieldMask{Paths: make([]string, 1_000_000)})
	if v, over := bounds.CheckWire(mask, wire); over {
		fmt.Printf("%s: at most %d items\n", v.Field.Name(), v.Max)
	}
	// Within the bound, the message is unmarshalled as usual.
	wire, _ = proto.Marshal(&fieldmaskpb.FieldMask{Paths: []string{"a", "b"}})
	_, over := bounds.CheckWire(mask, wire)
	fmt.Println(over)
	// Output:
	// paths: at most 2 items
	// false
}
