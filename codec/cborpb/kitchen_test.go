package cborpb_test

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	// The well-known types the kitchen sink refers to.
	_ "google.golang.org/protobuf/types/known/anypb"
	_ "google.golang.org/protobuf/types/known/durationpb"
	_ "google.golang.org/protobuf/types/known/emptypb"
	_ "google.golang.org/protobuf/types/known/fieldmaskpb"
	_ "google.golang.org/protobuf/types/known/structpb"
	_ "google.golang.org/protobuf/types/known/timestamppb"
	_ "google.golang.org/protobuf/types/known/wrapperspb"
)

// kitchenSink builds, at run time, a message with every field kind and
// every well-known type, which the sheba.v1 API does not have, to cover
// the mapping beyond it. It is a dynamicpb message, which also shows that
// the marshaler needs nothing but reflection.
func kitchenSink(tb testing.TB) protoreflect.MessageType {
	tb.Helper()
	type f = descriptorpb.FieldDescriptorProto
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	rep := descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	field := func(name string, num int32, label *descriptorpb.FieldDescriptorProto_Label, typ descriptorpb.FieldDescriptorProto_Type, typeName string) *f {
		fd := &f{
			Name:     proto.String(name),
			Number:   proto.Int32(num),
			Label:    label,
			Type:     typ.Enum(),
			JsonName: proto.String(jsonName(name)),
		}
		if typeName != "" {
			fd.TypeName = proto.String(typeName)
		}
		return fd
	}
	const (
		tInt32    = descriptorpb.FieldDescriptorProto_TYPE_INT32
		tInt64    = descriptorpb.FieldDescriptorProto_TYPE_INT64
		tUint32   = descriptorpb.FieldDescriptorProto_TYPE_UINT32
		tUint64   = descriptorpb.FieldDescriptorProto_TYPE_UINT64
		tSint32   = descriptorpb.FieldDescriptorProto_TYPE_SINT32
		tSint64   = descriptorpb.FieldDescriptorProto_TYPE_SINT64
		tFixed32  = descriptorpb.FieldDescriptorProto_TYPE_FIXED32
		tFixed64  = descriptorpb.FieldDescriptorProto_TYPE_FIXED64
		tSfixed32 = descriptorpb.FieldDescriptorProto_TYPE_SFIXED32
		tSfixed64 = descriptorpb.FieldDescriptorProto_TYPE_SFIXED64
		tFloat    = descriptorpb.FieldDescriptorProto_TYPE_FLOAT
		tDouble   = descriptorpb.FieldDescriptorProto_TYPE_DOUBLE
		tBool     = descriptorpb.FieldDescriptorProto_TYPE_BOOL
		tString   = descriptorpb.FieldDescriptorProto_TYPE_STRING
		tBytes    = descriptorpb.FieldDescriptorProto_TYPE_BYTES
		tEnum     = descriptorpb.FieldDescriptorProto_TYPE_ENUM
		tMessage  = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
	)
	oneof := func(fd *f, idx int32) *f {
		fd.OneofIndex = proto.Int32(idx)
		return fd
	}
	optional := oneof(field("opt", 25, opt, tInt32, ""), 1)
	optional.Proto3Optional = proto.Bool(true)
	mapEntry := func(name string, key descriptorpb.FieldDescriptorProto_Type, val descriptorpb.FieldDescriptorProto_Type, valType string) *descriptorpb.DescriptorProto {
		return &descriptorpb.DescriptorProto{
			Name: proto.String(name),
			Field: []*f{
				field("key", 1, opt, key, ""),
				field("value", 2, opt, val, valType),
			},
			Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
		}
	}
	file := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("cborpb_test/kitchen.proto"),
		Package: proto.String("cborpbtest"),
		Syntax:  proto.String("proto3"),
		Dependency: []string{
			"google/protobuf/any.proto", "google/protobuf/duration.proto",
			"google/protobuf/empty.proto", "google/protobuf/field_mask.proto",
			"google/protobuf/struct.proto", "google/protobuf/timestamp.proto",
			"google/protobuf/wrappers.proto",
		},
		EnumType: []*descriptorpb.EnumDescriptorProto{{
			Name: proto.String("Color"),
			Value: []*descriptorpb.EnumValueDescriptorProto{
				{Name: proto.String("COLOR_UNSPECIFIED"), Number: proto.Int32(0)},
				{Name: proto.String("COLOR_RED"), Number: proto.Int32(1)},
			},
		}},
		MessageType: []*descriptorpb.DescriptorProto{
			{
				Name: proto.String("Inner"),
				Field: []*f{
					field("name", 1, opt, tString, ""),
					field("nums", 2, rep, tInt64, ""),
				},
			},
			{
				Name: proto.String("Sink"),
				Field: []*f{
					field("f_int32", 1, opt, tInt32, ""),
					field("f_int64", 2, opt, tInt64, ""),
					field("f_uint32", 3, opt, tUint32, ""),
					field("f_uint64", 4, opt, tUint64, ""),
					field("f_sint32", 5, opt, tSint32, ""),
					field("f_sint64", 6, opt, tSint64, ""),
					field("f_fixed32", 7, opt, tFixed32, ""),
					field("f_fixed64", 8, opt, tFixed64, ""),
					field("f_sfixed32", 9, opt, tSfixed32, ""),
					field("f_sfixed64", 10, opt, tSfixed64, ""),
					field("f_float", 11, opt, tFloat, ""),
					field("f_double", 12, opt, tDouble, ""),
					field("f_bool", 13, opt, tBool, ""),
					field("f_string", 14, opt, tString, ""),
					field("f_bytes", 15, opt, tBytes, ""),
					field("color", 16, opt, tEnum, ".cborpbtest.Color"),
					field("inner", 17, opt, tMessage, ".cborpbtest.Inner"),
					field("names", 18, rep, tString, ""),
					field("inners", 19, rep, tMessage, ".cborpbtest.Inner"),
					field("by_name", 20, rep, tMessage, ".cborpbtest.Sink.ByNameEntry"),
					field("by_int", 21, rep, tMessage, ".cborpbtest.Sink.ByIntEntry"),
					field("by_bool", 22, rep, tMessage, ".cborpbtest.Sink.ByBoolEntry"),
					oneof(field("choice_text", 23, opt, tString, ""), 0),
					oneof(field("choice_inner", 24, opt, tMessage, ".cborpbtest.Inner"), 0),
					optional,
					field("ts", 26, opt, tMessage, ".google.protobuf.Timestamp"),
					field("dur", 27, opt, tMessage, ".google.protobuf.Duration"),
					field("any", 28, opt, tMessage, ".google.protobuf.Any"),
					field("st", 29, opt, tMessage, ".google.protobuf.Struct"),
					field("val", 30, opt, tMessage, ".google.protobuf.Value"),
					field("lv", 31, opt, tMessage, ".google.protobuf.ListValue"),
					field("w64", 32, opt, tMessage, ".google.protobuf.Int64Value"),
					field("wbytes", 33, opt, tMessage, ".google.protobuf.BytesValue"),
					field("wstring", 34, opt, tMessage, ".google.protobuf.StringValue"),
					field("fm", 35, opt, tMessage, ".google.protobuf.FieldMask"),
					field("empty", 36, opt, tMessage, ".google.protobuf.Empty"),
					field("stamps", 37, rep, tMessage, ".google.protobuf.Timestamp"),
					field("vals", 38, rep, tMessage, ".google.protobuf.Value"),
					field("any_wkt", 39, opt, tMessage, ".google.protobuf.Any"),
					field("colors", 40, rep, tEnum, ".cborpbtest.Color"),
				},
				NestedType: []*descriptorpb.DescriptorProto{
					mapEntry("ByNameEntry", tString, tInt64, ""),
					mapEntry("ByIntEntry", tInt32, tString, ""),
					mapEntry("ByBoolEntry", tBool, tMessage, ".cborpbtest.Inner"),
				},
				OneofDecl: []*descriptorpb.OneofDescriptorProto{
					{Name: proto.String("choice")},
					{Name: proto.String("_opt")},
				},
			},
		},
	}
	fd, err := protodesc.NewFile(file, protoregistry.GlobalFiles)
	if err != nil {
		tb.Fatalf("build kitchen sink descriptor: %v", err)
	}
	return dynamicpb.NewMessageType(fd.Messages().ByName("Sink"))
}

// jsonName is protoc's lowerCamelCase of a field name.
func jsonName(s string) string {
	out := make([]byte, 0, len(s))
	up := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' {
			up = true
			continue
		}
		if up && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		up = false
		out = append(out, c)
	}
	return string(out)
}
