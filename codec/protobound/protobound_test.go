package protobound_test

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/shebasvc/sheba/codec/protobound"
)

// Three messages with a bounded field each: FieldMask.paths (repeated
// string), SourceCodeInfo.Location.path (repeated int32, packed) and
// Struct.fields (a map).
var (
	paths  = (&fieldmaskpb.FieldMask{}).ProtoReflect().Descriptor()
	path   = (&descriptorpb.SourceCodeInfo_Location{}).ProtoReflect().Descriptor()
	fields = (&structpb.Struct{}).ProtoReflect().Descriptor()
)

func newBounds() *protobound.Bounds {
	return protobound.New(func(fd protoreflect.FieldDescriptor) int {
		switch fd.FullName() {
		case "google.protobuf.FieldMask.paths", "google.protobuf.SourceCodeInfo.Location.path":
			return 3
		case "google.protobuf.Struct.fields":
			return 2
		}
		return 0
	}, paths, path, fields)
}

// record appends a record of field num, wire type typ, value v (a varint
// for VarintType, else length-delimited bytes).
func record(b []byte, num protowire.Number, typ protowire.Type, v []byte) []byte {
	b = protowire.AppendTag(b, num, typ)
	if typ == protowire.VarintType {
		return protowire.AppendVarint(b, uint64(len(v)))
	}
	return protowire.AppendBytes(b, v)
}

func packed(values ...uint64) []byte {
	var b []byte
	for _, v := range values {
		b = protowire.AppendVarint(b, v)
	}
	return b
}

// TestCheckWire: the wire scan counts what proto.Unmarshal reads (one item
// a record, the items of a packed record, none for a record of another
// wire type), agrees with the check of the decoded message, and reports a
// message that does not parse as violating nothing.
func TestCheckWire(t *testing.T) {
	b := newBounds()
	for _, test := range []struct {
		name string
		md   protoreflect.MessageDescriptor
		buf  []byte
		want bool
	}{
		{"three paths", paths, mustMarshal(t, &fieldmaskpb.FieldMask{Paths: []string{"a", "b", "c"}}), false},
		{"four paths", paths, mustMarshal(t, &fieldmaskpb.FieldMask{Paths: []string{"a", "b", "c", "d"}}), true},
		{"four empty paths", paths, mustMarshal(t, &fieldmaskpb.FieldMask{Paths: make([]string, 4)}), true},
		{"a path and three varints of its number", paths,
			record(record(record(record(nil, 1, protowire.BytesType, []byte("a")), 1, protowire.VarintType, nil), 1, protowire.VarintType, nil), 1, protowire.VarintType, nil), false},
		{"three packed", path, mustMarshal(t, &descriptorpb.SourceCodeInfo_Location{Path: []int32{1, 300, -1}}), false},
		{"four packed", path, mustMarshal(t, &descriptorpb.SourceCodeInfo_Location{Path: []int32{1, 300, -1, 4}}), true},
		{"four unpacked", path, record(record(record(record(nil, 1, protowire.VarintType, nil), 1, protowire.VarintType, nil), 1, protowire.VarintType, nil), 1, protowire.VarintType, nil), true},
		{"two packed, two unpacked", path, record(record(record(nil, 1, protowire.BytesType, packed(1, 2)), 1, protowire.VarintType, nil), 1, protowire.VarintType, nil), true},
		{"two map entries", fields, mustMarshal(t, mustStruct(t, map[string]any{"a": 1, "b": 2})), false},
		{"three map entries", fields, mustMarshal(t, mustStruct(t, map[string]any{"a": 1, "b": 2, "c": 3})), true},
		{"four paths, then garbage", paths, append(mustMarshal(t, &fieldmaskpb.FieldMask{Paths: []string{"a", "b", "c", "d"}}), 0xff), true},
		{"garbage first", paths, append([]byte{0xff}, mustMarshal(t, &fieldmaskpb.FieldMask{Paths: []string{"a", "b", "c", "d"}})...), false},
		{"truncated", paths, mustMarshal(t, &fieldmaskpb.FieldMask{Paths: []string{"a", "b", "c", "dddd"}})[:10], false},
		{"empty", paths, nil, false},
	} {
		t.Run(test.name, func(t *testing.T) {
			v, over := b.CheckWire(test.md, test.buf)
			if over != test.want {
				t.Fatalf("CheckWire: over %v (%v), want %v", over, v, test.want)
			}
			if over && (v.Field.ContainingMessage() != test.md || v.Max < 2) {
				t.Errorf("violation %v of %s, want one of a field of %s", v.Field.FullName(), v.Field.ContainingMessage().FullName(), test.md.FullName())
			}
			// What proto.Unmarshal makes of the bytes, when they parse,
			// breaks the same bound.
			m := newMessage(test.md)
			if err := proto.Unmarshal(test.buf, m.Interface()); err != nil {
				return
			}
			if _, decodedOver := b.Check(m); decodedOver != over {
				t.Errorf("Check of the decoded message: over %v, CheckWire %v", decodedOver, over)
			}
		})
	}
}

// TestCheckWireStopsEarly: a megabyte of empty items is found over its
// bound at its fourth item, without an allocation; a message type without
// a bounded field is not scanned.
func TestCheckWireStopsEarly(t *testing.T) {
	b := newBounds()
	buf := mustMarshal(t, &fieldmaskpb.FieldMask{Paths: make([]string, 500_000)})
	if allocs := testing.AllocsPerRun(100, func() {
		if _, over := b.CheckWire(paths, buf); !over {
			t.Fatal("a megabyte of paths: not over")
		}
	}); allocs != 0 {
		t.Errorf("%v allocations a check, want none", allocs)
	}
	if b.Has((&structpb.Value{}).ProtoReflect().Descriptor()) || !b.Has(paths) {
		t.Errorf("Has: Value %v, FieldMask %v; want false, true", b.Has((&structpb.Value{}).ProtoReflect().Descriptor()), b.Has(paths))
	}
	var none *protobound.Bounds
	if _, over := none.CheckWire(paths, buf); over || none.Has(paths) {
		t.Error("a nil Bounds bounds something")
	}
	if _, over := none.Check((&fieldmaskpb.FieldMask{Paths: make([]string, 9)}).ProtoReflect()); over {
		t.Error("a nil Bounds bounds a decoded message")
	}
}

func newMessage(md protoreflect.MessageDescriptor) protoreflect.Message {
	switch md {
	case paths:
		return (&fieldmaskpb.FieldMask{}).ProtoReflect()
	case path:
		return (&descriptorpb.SourceCodeInfo_Location{}).ProtoReflect()
	}
	return (&structpb.Struct{}).ProtoReflect()
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustStruct(t *testing.T, v map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(v)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
