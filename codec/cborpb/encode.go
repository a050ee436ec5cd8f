package cborpb

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fxamacker/cbor/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Range of google.protobuf.Timestamp and Duration, as in their .proto
// comments and protojson.
const (
	minTimestampSeconds = -62135596800 // 0001-01-01T00:00:00Z
	maxTimestampSeconds = 253402300799 // 9999-12-31T23:59:59Z
	maxDurationSeconds  = 315576000000
)

// encoder turns a message into the tree of plain values that fxamacker
// encodes: map[string]any, []any, bool, int64, uint64, float32, float64,
// string, []byte, nil and cbor.Tag.
type encoder struct {
	resolver protoregistry.MessageTypeResolver
}

func (e encoder) message(m protoreflect.Message) (any, error) {
	if !m.IsValid() {
		// A nil message at the top: protojson writes {} for it too.
		return map[string]any{}, nil
	}
	md := m.Descriptor()
	if wkt := wellKnown(md.FullName()); wkt != wktNone {
		return e.wellKnown(wkt, m)
	}
	if md.ExtensionRanges().Len() > 0 {
		var ext protoreflect.FieldDescriptor
		m.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
			if fd.IsExtension() {
				ext = fd
			}
			return ext == nil
		})
		if ext != nil {
			return nil, fmt.Errorf("cborpb: %s: extension %s is not supported", md.FullName(), ext.FullName())
		}
	}
	fields := md.Fields()
	obj := make(map[string]any, fields.Len())
	for i := range fields.Len() {
		fd := fields.Get(i)
		// The presence rule of protojson's EmitDefaultValues: a field
		// without presence is written even when it holds its default.
		if !m.Has(fd) && (fd.HasPresence() || fd.ContainingOneof() != nil) {
			continue
		}
		v, err := e.field(fd, m.Get(fd))
		if err != nil {
			return nil, err
		}
		obj[fd.JSONName()] = v
	}
	return obj, nil
}

func (e encoder) field(fd protoreflect.FieldDescriptor, v protoreflect.Value) (any, error) {
	switch {
	case fd.IsList():
		list := v.List()
		out := make([]any, list.Len())
		for i := range list.Len() {
			ev, err := e.singular(fd, list.Get(i))
			if err != nil {
				return nil, err
			}
			out[i] = ev
		}
		return out, nil
	case fd.IsMap():
		mp := v.Map()
		out := make(map[string]any, mp.Len())
		var err error
		mp.Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
			var ev any
			ev, err = e.singular(fd.MapValue(), mv)
			// Keys are text, as in JSON: "1", "true", "name".
			out[k.String()] = ev
			return err == nil
		})
		return out, err
	}
	return e.singular(fd, v)
}

func (e encoder) singular(fd protoreflect.FieldDescriptor, v protoreflect.Value) (any, error) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return v.Bool(), nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return v.Int(), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return v.Uint(), nil
	case protoreflect.FloatKind:
		return float32(v.Float()), nil
	case protoreflect.DoubleKind:
		return v.Float(), nil
	case protoreflect.StringKind:
		return v.String(), nil
	case protoreflect.BytesKind:
		return v.Bytes(), nil
	case protoreflect.EnumKind:
		ed := fd.Enum()
		if ed.FullName() == "google.protobuf.NullValue" {
			return nil, nil
		}
		if ev := ed.Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name()), nil
		}
		// A number this binary does not know is kept as a number, as
		// protojson does.
		return int64(v.Enum()), nil
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return e.message(v.Message())
	}
	return nil, fmt.Errorf("cborpb: field %s has unsupported kind %v", fd.FullName(), fd.Kind())
}

// wkt names the well-known types whose JSON form is not a plain object.
type wkt int

const (
	wktNone wkt = iota
	wktAny
	wktTimestamp
	wktDuration
	wktWrapper
	wktStruct
	wktValue
	wktListValue
	wktFieldMask
	wktEmpty
)

func wellKnown(name protoreflect.FullName) wkt {
	if name.Parent() != "google.protobuf" {
		return wktNone
	}
	switch name.Name() {
	case "Any":
		return wktAny
	case "Timestamp":
		return wktTimestamp
	case "Duration":
		return wktDuration
	case "BoolValue", "Int32Value", "Int64Value", "UInt32Value", "UInt64Value",
		"FloatValue", "DoubleValue", "StringValue", "BytesValue":
		return wktWrapper
	case "Struct":
		return wktStruct
	case "Value":
		return wktValue
	case "ListValue":
		return wktListValue
	case "FieldMask":
		return wktFieldMask
	case "Empty":
		return wktEmpty
	}
	return wktNone
}

func (e encoder) wellKnown(kind wkt, m protoreflect.Message) (any, error) {
	fields := m.Descriptor().Fields()
	switch kind {
	case wktAny:
		return e.any(m)
	case wktTimestamp:
		s, err := formatTimestamp(m.Get(fields.ByNumber(1)).Int(), m.Get(fields.ByNumber(2)).Int())
		if err != nil {
			return nil, err
		}
		return cbor.Tag{Number: 0, Content: s}, nil
	case wktDuration:
		return formatDuration(m.Get(fields.ByNumber(1)).Int(), m.Get(fields.ByNumber(2)).Int())
	case wktWrapper:
		fd := fields.ByNumber(1)
		return e.singular(fd, m.Get(fd))
	case wktStruct:
		return e.field(fields.ByNumber(1), m.Get(fields.ByNumber(1)))
	case wktListValue:
		return e.field(fields.ByNumber(1), m.Get(fields.ByNumber(1)))
	case wktValue:
		fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("kind"))
		if fd == nil {
			return nil, errors.New("cborpb: google.protobuf.Value: none of the oneof fields is set")
		}
		return e.singular(fd, m.Get(fd))
	case wktFieldMask:
		paths := m.Get(fields.ByNumber(1)).List()
		out := make([]string, paths.Len())
		for i := range paths.Len() {
			p := paths.Get(i).String()
			c := camelCase(p)
			if snakeCase(c) != p {
				return nil, fmt.Errorf("cborpb: google.protobuf.FieldMask: path %q cannot be written in lowerCamelCase", p)
			}
			out[i] = c
		}
		return strings.Join(out, ","), nil
	case wktEmpty:
		return map[string]any{}, nil
	}
	return nil, fmt.Errorf("cborpb: unhandled well-known type %s", m.Descriptor().FullName())
}

// any writes google.protobuf.Any as protojson does: "@type" beside the
// fields of the packed message, or beside "value" when that message is
// itself a well-known type with a non-object form.
func (e encoder) any(m protoreflect.Message) (any, error) {
	fields := m.Descriptor().Fields()
	typeURL := m.Get(fields.ByNumber(1)).String()
	value := m.Get(fields.ByNumber(2)).Bytes()
	if typeURL == "" {
		if len(value) == 0 {
			return map[string]any{}, nil
		}
		return nil, errors.New("cborpb: google.protobuf.Any: value without type_url")
	}
	mt, err := e.resolver.FindMessageByURL(typeURL)
	if err != nil {
		return nil, fmt.Errorf("cborpb: google.protobuf.Any: unknown type %q: %w", typeURL, err)
	}
	inner := mt.New()
	if err := (proto.UnmarshalOptions{AllowPartial: true, Resolver: resolverOnly{e.resolver}}).Unmarshal(value, inner.Interface()); err != nil {
		return nil, fmt.Errorf("cborpb: google.protobuf.Any: %s: %w", typeURL, err)
	}
	v, err := e.message(inner)
	if err != nil {
		return nil, err
	}
	if wellKnown(inner.Descriptor().FullName()) != wktNone {
		// A well-known type goes under "value", Empty included, as
		// protojson does.
		return map[string]any{"@type": typeURL, "value": v}, nil
	}
	obj := v.(map[string]any)
	obj["@type"] = typeURL
	return obj, nil
}

// resolverOnly adapts a MessageTypeResolver to what proto.UnmarshalOptions
// wants; extensions are not resolved (they are not supported).
type resolverOnly struct {
	protoregistry.MessageTypeResolver
}

func (resolverOnly) FindExtensionByName(protoreflect.FullName) (protoreflect.ExtensionType, error) {
	return nil, protoregistry.NotFound
}

func (resolverOnly) FindExtensionByNumber(protoreflect.FullName, protoreflect.FieldNumber) (protoreflect.ExtensionType, error) {
	return nil, protoregistry.NotFound
}

// formatTimestamp writes RFC 3339 in UTC with 0, 3, 6 or 9 fractional
// digits, as protojson does.
func formatTimestamp(secs, nanos int64) (string, error) {
	if secs < minTimestampSeconds || secs > maxTimestampSeconds || nanos < 0 || nanos >= 1e9 {
		return "", fmt.Errorf("cborpb: google.protobuf.Timestamp: seconds %d nanos %d out of range", secs, nanos)
	}
	t := time.Unix(secs, nanos).UTC()
	s := t.Format("2006-01-02T15:04:05.000000000")
	s = strings.TrimSuffix(s, "000")
	s = strings.TrimSuffix(s, "000")
	s = strings.TrimSuffix(s, "000")
	s = strings.TrimSuffix(s, ".")
	return s + "Z", nil
}

// formatDuration writes "<seconds>[.<fraction>]s" as protojson does.
func formatDuration(secs, nanos int64) (string, error) {
	if secs < -maxDurationSeconds || secs > maxDurationSeconds ||
		nanos <= -1e9 || nanos >= 1e9 || (secs > 0 && nanos < 0) || (secs < 0 && nanos > 0) {
		return "", fmt.Errorf("cborpb: google.protobuf.Duration: seconds %d nanos %d out of range", secs, nanos)
	}
	sign := ""
	if secs < 0 || nanos < 0 {
		sign, secs, nanos = "-", -secs, -nanos
	}
	frac := fmt.Sprintf("%09d", nanos)
	frac = strings.TrimSuffix(frac, "000")
	frac = strings.TrimSuffix(frac, "000")
	frac = strings.TrimSuffix(frac, "000")
	s := sign + strconv.FormatInt(secs, 10)
	if frac != "" {
		s += "." + frac
	}
	return s + "s", nil
}

// camelCase turns foo_bar.baz_qux into fooBar.bazQux, as protojson does
// for FieldMask paths.
func camelCase(s string) string {
	var b strings.Builder
	up := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_':
			up = true
			continue
		case up && 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
		}
		up = false
		b.WriteByte(c)
	}
	return b.String()
}

// snakeCase is the inverse of camelCase for the paths it can write.
func snakeCase(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			b.WriteByte('_')
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	return b.String()
}
