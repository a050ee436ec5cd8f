package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// field describes one field of the test message: its type, and its rules
// (none when nil).
type field struct {
	typ      descriptorpb.FieldDescriptorProto_Type
	repeated bool
	optional bool // proto3 optional: the field has presence
	rules    *validate.FieldRules
}

// testField returns the descriptor of f as the only field, "f", of a
// proto3 message, beside an enum State (UNSPECIFIED, ON, OFF).
func testField(t *testing.T, f field) protoreflect.FieldDescriptor {
	t.Helper()
	fp := &descriptorpb.FieldDescriptorProto{
		Name:     proto.String("f"),
		JsonName: proto.String("f"),
		Number:   proto.Int32(1),
		Type:     f.typ.Enum(),
		Label:    descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
	}
	if f.repeated {
		fp.Label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	}
	if f.typ == descriptorpb.FieldDescriptorProto_TYPE_ENUM {
		fp.TypeName = proto.String(".test.State")
	}
	msg := &descriptorpb.DescriptorProto{Name: proto.String("M"), Field: []*descriptorpb.FieldDescriptorProto{fp}}
	if f.optional {
		fp.Proto3Optional = proto.Bool(true)
		fp.OneofIndex = proto.Int32(0)
		msg.OneofDecl = []*descriptorpb.OneofDescriptorProto{{Name: proto.String("_f")}}
	}
	if f.rules != nil {
		fp.Options = &descriptorpb.FieldOptions{}
		proto.SetExtension(fp.Options, validate.E_Field, f.rules)
	}
	file, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:    proto.String("test.proto"),
		Package: proto.String("test"),
		Syntax:  proto.String("proto3"),
		EnumType: []*descriptorpb.EnumDescriptorProto{{
			Name: proto.String("State"),
			Value: []*descriptorpb.EnumValueDescriptorProto{
				{Name: proto.String("UNSPECIFIED"), Number: proto.Int32(0)},
				{Name: proto.String("ON"), Number: proto.Int32(1)},
				{Name: proto.String("OFF"), Number: proto.Int32(2)},
			},
		}},
		MessageType: []*descriptorpb.DescriptorProto{msg},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return file.Messages().Get(0).Fields().Get(0)
}

// jsonOf returns o as protoc-gen-openapiv3 would have it decoded.
func jsonOf(t *testing.T, o *object) any {
	t.Helper()
	var b bytes.Buffer
	if err := o.write(&b); err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestApplyField(t *testing.T) {
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING
	i32 := descriptorpb.FieldDescriptorProto_TYPE_INT32
	enum := descriptorpb.FieldDescriptorProto_TYPE_ENUM
	strRules := func(r *validate.StringRules) *validate.FieldRules {
		return validate.FieldRules_builder{String: r}.Build()
	}
	i32Rules := func(r *validate.Int32Rules) *validate.FieldRules {
		return validate.FieldRules_builder{Int32: r}.Build()
	}
	for _, test := range []struct {
		name         string
		field        field
		want         string // the schema {"type": ...} becomes
		wantRequired bool
	}{
		{
			name:  "no rules",
			field: field{typ: str},
			want:  `{"type": "string"}`,
		},
		{
			name: "username",
			field: field{typ: str, rules: strRules(validate.StringRules_builder{
				MinLen: proto.Uint64(3), MaxLen: proto.Uint64(64), Pattern: proto.String("^[a-z0-9._-]+$"),
			}.Build())},
			want:         `{"type": "string", "minLength": 3, "maxLength": 64, "pattern": "^[a-z0-9._-]+$"}`,
			wantRequired: true,
		},
		{
			name:         "uuid",
			field:        field{typ: str, rules: strRules(validate.StringRules_builder{Uuid: proto.Bool(true)}.Build())},
			want:         `{"type": "string", "format": "uuid"}`,
			wantRequired: true,
		},
		{
			name: "password: bytes",
			field: field{typ: str, rules: strRules(validate.StringRules_builder{
				MinBytes: proto.Uint64(8), MaxBytes: proto.Uint64(256),
			}.Build())},
			want:         `{"type": "string", "maxLength": 256}`,
			wantRequired: true,
		},
		{
			name:  "at most 256 bytes, empty allowed",
			field: field{typ: str, rules: strRules(validate.StringRules_builder{MaxBytes: proto.Uint64(256)}.Build())},
			want:  `{"type": "string", "maxLength": 256}`,
		},
		{
			name: "a filter: empty means none",
			field: field{typ: str, rules: validate.FieldRules_builder{
				Ignore: validate.Ignore_IGNORE_IF_ZERO_VALUE.Enum(),
				String: validate.StringRules_builder{Pattern: proto.String("^[a-z]{1,64}$")}.Build(),
			}.Build()},
			want: `{"type": "string", "anyOf": [{"const": ""}, {"pattern": "^[a-z]{1,64}$"}]}`,
		},
		{
			name:  "ignored zero that passes anyway",
			field: field{typ: str, rules: validate.FieldRules_builder{Ignore: validate.Ignore_IGNORE_IF_ZERO_VALUE.Enum(), String: validate.StringRules_builder{MaxLen: proto.Uint64(9)}.Build()}.Build()},
			want:  `{"type": "string", "maxLength": 9}`,
		},
		{
			name:  "optional: checked when set",
			field: field{typ: str, optional: true, rules: strRules(validate.StringRules_builder{MinLen: proto.Uint64(1)}.Build())},
			want:  `{"type": "string", "minLength": 1}`,
		},
		{
			name:         "required",
			field:        field{typ: str, rules: validate.FieldRules_builder{Required: proto.Bool(true)}.Build()},
			want:         `{"type": "string"}`,
			wantRequired: true,
		},
		{
			name:  "ignored always",
			field: field{typ: str, rules: validate.FieldRules_builder{Ignore: validate.Ignore_IGNORE_ALWAYS.Enum(), String: validate.StringRules_builder{MinLen: proto.Uint64(1)}.Build()}.Build()},
			want:  `{"type": "string"}`,
		},
		{
			name:  "in, not in",
			field: field{typ: str, rules: strRules(validate.StringRules_builder{In: []string{"a", ""}, NotIn: []string{"b"}}.Build())},
			want:  `{"type": "string", "enum": ["a", ""], "not": {"enum": ["b"]}}`,
		},
		{
			name:  "page size",
			field: field{typ: i32, rules: i32Rules(validate.Int32Rules_builder{Gte: proto.Int32(0)}.Build())},
			want:  `{"type": "integer", "minimum": 0}`,
		},
		{
			name:         "exclusive bounds",
			field:        field{typ: i32, rules: i32Rules(validate.Int32Rules_builder{Gt: proto.Int32(0), Lt: proto.Int32(10)}.Build())},
			want:         `{"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}`,
			wantRequired: true,
		},
		{
			name:  "inclusive bounds around zero",
			field: field{typ: i32, rules: i32Rules(validate.Int32Rules_builder{Gte: proto.Int32(-5), Lte: proto.Int32(1000), In: []int32{0, 7}}.Build())},
			want:  `{"type": "integer", "minimum": -5, "maximum": 1000, "enum": [0, 7]}`,
		},
		{
			name:         "a range left out: protovalidate's outside range",
			field:        field{typ: i32, rules: i32Rules(validate.Int32Rules_builder{Lt: proto.Int32(-1), Gt: proto.Int32(1)}.Build())},
			want:         `{"type": "integer"}`,
			wantRequired: true,
		},
		{
			name: "event types",
			field: field{typ: str, repeated: true, rules: validate.FieldRules_builder{Repeated: validate.RepeatedRules_builder{
				MinItems: proto.Uint64(1), MaxItems: proto.Uint64(4), Unique: proto.Bool(true),
				Items: strRules(validate.StringRules_builder{In: []string{"a.created", "a.deleted"}}.Build()),
			}.Build()}.Build()},
			want:         `{"type": "array", "items": {"type": "string", "enum": ["a.created", "a.deleted"]}, "minItems": 1, "maxItems": 4, "uniqueItems": true}`,
			wantRequired: true,
		},
		{
			name:         "enum",
			field:        field{typ: enum, rules: validate.FieldRules_builder{Enum: validate.EnumRules_builder{DefinedOnly: proto.Bool(true), In: []int32{1}, NotIn: []int32{2}}.Build()}.Build()},
			want:         `{"type": "string", "enum": ["ON"], "not": {"enum": ["OFF"]}}`,
			wantRequired: true,
		},
	} {
		t.Run(test.name, func(t *testing.T) {
			fd := testField(t, test.field)
			s := obj("type", "string")
			switch {
			case test.field.repeated:
				s = obj("type", "array", "items", obj("type", "string"))
			case test.field.typ == i32:
				s = obj("type", "integer")
			}
			required := applyField(s, fd)
			var want any
			if err := json.Unmarshal([]byte(test.want), &want); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, jsonOf(t, s)); diff != "" {
				t.Errorf("schema (-want +got):\n%s", diff)
			}
			if required != test.wantRequired {
				t.Errorf("required: got %v, want %v", required, test.wantRequired)
			}
		})
	}
}

// TestObjectKeepsOrder reads and writes a document: the same JSON, keys
// in the same order, text as it is.
func TestObjectKeepsOrder(t *testing.T) {
	const in = `{
  "openapi": "3.1.0",
  "paths": {
    "/v1/z": {},
    "/v1/a": {
      "get": {
        "summary": "<key> & \"quotes\"",
        "n": 1.5,
        "list": [
          true,
          null,
          []
        ]
      }
    }
  },
  "info": {}
}
`
	o, err := readObject(bytes.NewReader([]byte(in)))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := o.write(&out); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, out.String()); diff != "" {
		t.Errorf("written (-read +written):\n%s", diff)
	}
	o.obj("paths").setAfter("/v1/z", "/v1/m", obj("k", []string{"x"}))
	if got, want := o.obj("paths").keys, []string{"/v1/z", "/v1/m", "/v1/a"}; !cmp.Equal(got, want) {
		t.Errorf("setAfter: keys %v, want %v", got, want)
	}
}

func TestFirstSentence(t *testing.T) {
	for in, want := range map[string]string{
		"Ping answers \"pong\". It is public.":        "Ping answers \"pong\".",
		"Lists the things, newest\nfirst. Then more.": "Lists the things, newest first.",
		"No period at all":                            "No period at all",
		"Version 1.2 is here.":                        "Version 1.2 is here.",
	} {
		if got := firstSentence(in); got != want {
			t.Errorf("firstSentence(%q): got %q, want %q", in, got, want)
		}
	}
}
