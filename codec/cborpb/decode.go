package cborpb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// decoder fills a message from the tree fxamacker decodes into an any:
// map[string]any, []any, bool, uint64, int64, float64, string, []byte,
// nil, time.Time (tags 0 and 1) and, for anything else, types that no field
// accepts.
type decoder struct {
	resolver protoregistry.MessageTypeResolver
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "map"
	case []any:
		return "array"
	case bool:
		return "bool"
	case uint64, int64:
		return "integer"
	case float64:
		return "float"
	case string:
		return "text string"
	case []byte:
		return "byte string"
	case time.Time:
		return "time"
	}
	return fmt.Sprintf("%T", v)
}

func wrongType(md protoreflect.Descriptor, want string, got any) error {
	return fmt.Errorf("cborpb: %s: want %s, got %s", md.FullName(), want, typeName(got))
}

func (d decoder) message(v any, m protoreflect.Message) error {
	md := m.Descriptor()
	if wkt := wellKnown(md.FullName()); wkt != wktNone {
		return d.wellKnown(wkt, v, m)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return wrongType(md, "map", v)
	}
	return d.fields(obj, m, "")
}

// fields sets the fields of m from obj, skipping the key skip ("@type" in
// an Any).
func (d decoder) fields(obj map[string]any, m protoreflect.Message, skip string) error {
	md := m.Descriptor()
	fields := md.Fields()
	for key, val := range obj {
		if key == skip {
			continue
		}
		fd := fields.ByJSONName(key)
		if fd == nil {
			fd = fields.ByTextName(key)
			if fd != nil && fd.JSONName() != key {
				if _, dup := obj[fd.JSONName()]; dup {
					return fmt.Errorf("cborpb: %s: field %q given twice", md.FullName(), key)
				}
			}
		}
		if fd == nil || fd.IsExtension() {
			return fmt.Errorf("cborpb: %s: unknown field %q", md.FullName(), key)
		}
		if val == nil && (fd.IsList() || fd.IsMap() || !isValue(fd)) {
			// null means unset, as in protojson.
			continue
		}
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			if other := m.WhichOneof(od); other != nil {
				return fmt.Errorf("cborpb: %s: oneof %s has both %q and %q", md.FullName(), od.Name(), other.JSONName(), fd.JSONName())
			}
		}
		if err := d.field(fd, val, m); err != nil {
			return err
		}
	}
	return nil
}

// isValue reports whether fd, or each element of it, holds a
// google.protobuf.Value (or the NullValue enum), the only types for which
// null is a value.
func isValue(fd protoreflect.FieldDescriptor) bool {
	switch {
	case fd.IsMap():
		return false
	case fd.Message() != nil:
		return fd.Message().FullName() == "google.protobuf.Value"
	case fd.Enum() != nil:
		return fd.Enum().FullName() == "google.protobuf.NullValue"
	}
	return false
}

func (d decoder) field(fd protoreflect.FieldDescriptor, v any, m protoreflect.Message) error {
	switch {
	case fd.IsList():
		arr, ok := v.([]any)
		if !ok {
			return wrongType(fd, "array", v)
		}
		list := m.Mutable(fd).List()
		for _, ev := range arr {
			if ev == nil && !isValue(fd) {
				return fmt.Errorf("cborpb: %s: null in a list", fd.FullName())
			}
			pv, err := d.singular(fd, ev, list.NewElement)
			if err != nil {
				return err
			}
			list.Append(pv)
		}
		return nil
	case fd.IsMap():
		obj, ok := v.(map[string]any)
		if !ok {
			return wrongType(fd, "map", v)
		}
		mp := m.Mutable(fd).Map()
		kd, vd := fd.MapKey(), fd.MapValue()
		for key, ev := range obj {
			k, err := mapKey(kd, key)
			if err != nil {
				return err
			}
			if ev == nil && !isValue(vd) {
				return fmt.Errorf("cborpb: %s: null map value", fd.FullName())
			}
			pv, err := d.singular(vd, ev, mp.NewValue)
			if err != nil {
				return err
			}
			mp.Set(k, pv)
		}
		return nil
	}
	pv, err := d.singular(fd, v, func() protoreflect.Value { return m.NewField(fd) })
	if err != nil {
		return err
	}
	m.Set(fd, pv)
	return nil
}

// singular decodes one value of fd's kind; newMessage makes the message
// to fill when that kind is a message.
func (d decoder) singular(fd protoreflect.FieldDescriptor, v any, newMessage func() protoreflect.Value) (protoreflect.Value, error) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		b, ok := v.(bool)
		if !ok {
			return protoreflect.Value{}, wrongType(fd, "bool", v)
		}
		return protoreflect.ValueOfBool(b), nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		n, err := integer(fd, v, math.MinInt32, math.MaxInt32)
		return protoreflect.ValueOfInt32(int32(n)), err
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		n, err := integer(fd, v, math.MinInt64, math.MaxInt64)
		return protoreflect.ValueOfInt64(n), err
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		n, err := unsigned(fd, v, math.MaxUint32)
		return protoreflect.ValueOfUint32(uint32(n)), err
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		n, err := unsigned(fd, v, math.MaxUint64)
		return protoreflect.ValueOfUint64(n), err
	case protoreflect.FloatKind:
		f, err := float(fd, v)
		if err == nil && !math.IsInf(f, 0) && math.IsInf(float64(float32(f)), 0) {
			err = fmt.Errorf("cborpb: %s: %v overflows a float", fd.FullName(), f)
		}
		return protoreflect.ValueOfFloat32(float32(f)), err
	case protoreflect.DoubleKind:
		f, err := float(fd, v)
		return protoreflect.ValueOfFloat64(f), err
	case protoreflect.StringKind:
		s, ok := v.(string)
		if !ok {
			return protoreflect.Value{}, wrongType(fd, "text string", v)
		}
		return protoreflect.ValueOfString(s), nil
	case protoreflect.BytesKind:
		b, ok := v.([]byte)
		if !ok {
			return protoreflect.Value{}, wrongType(fd, "byte string", v)
		}
		return protoreflect.ValueOfBytes(b), nil
	case protoreflect.EnumKind:
		return enum(fd, v)
	case protoreflect.MessageKind, protoreflect.GroupKind:
		mv := newMessage()
		if err := d.message(v, mv.Message()); err != nil {
			return protoreflect.Value{}, err
		}
		return mv, nil
	}
	return protoreflect.Value{}, fmt.Errorf("cborpb: field %s has unsupported kind %v", fd.FullName(), fd.Kind())
}

func integer(fd protoreflect.Descriptor, v any, lo, hi int64) (int64, error) {
	switch n := v.(type) {
	case int64:
		if n >= lo && n <= hi {
			return n, nil
		}
	case uint64:
		if n <= uint64(hi) {
			return int64(n), nil
		}
	default:
		return 0, wrongType(fd, "integer", v)
	}
	return 0, fmt.Errorf("cborpb: %s: %v out of range", fd.FullName(), v)
}

func unsigned(fd protoreflect.Descriptor, v any, hi uint64) (uint64, error) {
	switch n := v.(type) {
	case uint64:
		if n <= hi {
			return n, nil
		}
	case int64:
		// Negative: fxamacker gives uint64 for every other integer.
	default:
		return 0, wrongType(fd, "integer", v)
	}
	return 0, fmt.Errorf("cborpb: %s: %v out of range", fd.FullName(), v)
}

// float accepts integers too: a CBOR encoder may write 1.0 as 1.
func float(fd protoreflect.Descriptor, v any) (float64, error) {
	switch n := v.(type) {
	case float64:
		return n, nil
	case int64:
		return float64(n), nil
	case uint64:
		return float64(n), nil
	}
	return 0, wrongType(fd, "float", v)
}

func enum(fd protoreflect.FieldDescriptor, v any) (protoreflect.Value, error) {
	ed := fd.Enum()
	switch n := v.(type) {
	case nil:
		if ed.FullName() == "google.protobuf.NullValue" {
			return protoreflect.ValueOfEnum(0), nil
		}
	case string:
		if ev := ed.Values().ByName(protoreflect.Name(n)); ev != nil {
			return protoreflect.ValueOfEnum(ev.Number()), nil
		}
		return protoreflect.Value{}, fmt.Errorf("cborpb: %s: unknown %s value %q", fd.FullName(), ed.FullName(), n)
	case int64, uint64:
		num, err := integer(fd, v, math.MinInt32, math.MaxInt32)
		if err != nil {
			return protoreflect.Value{}, err
		}
		if ed.IsClosed() && ed.Values().ByNumber(protoreflect.EnumNumber(num)) == nil {
			return protoreflect.Value{}, fmt.Errorf("cborpb: %s: unknown %s value %d", fd.FullName(), ed.FullName(), num)
		}
		return protoreflect.ValueOfEnum(protoreflect.EnumNumber(num)), nil
	}
	return protoreflect.Value{}, wrongType(fd, "enum name or number", v)
}

// mapKey parses a map key, which is text whatever the key kind, as in
// JSON.
func mapKey(fd protoreflect.FieldDescriptor, s string) (protoreflect.MapKey, error) {
	bad := func(err error) (protoreflect.MapKey, error) {
		return protoreflect.MapKey{}, fmt.Errorf("cborpb: %s: invalid map key %q: %v", fd.FullName(), s, err)
	}
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(s).MapKey(), nil
	case protoreflect.BoolKind:
		switch s {
		case "true":
			return protoreflect.ValueOfBool(true).MapKey(), nil
		case "false":
			return protoreflect.ValueOfBool(false).MapKey(), nil
		}
		return bad(errors.New("want true or false"))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return bad(err)
		}
		return protoreflect.ValueOfInt32(int32(n)).MapKey(), nil
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return bad(err)
		}
		return protoreflect.ValueOfInt64(n).MapKey(), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return bad(err)
		}
		return protoreflect.ValueOfUint32(uint32(n)).MapKey(), nil
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return bad(err)
		}
		return protoreflect.ValueOfUint64(n).MapKey(), nil
	}
	return bad(fmt.Errorf("unsupported key kind %v", fd.Kind()))
}

func (d decoder) wellKnown(kind wkt, v any, m protoreflect.Message) error {
	md := m.Descriptor()
	fields := md.Fields()
	switch kind {
	case wktAny:
		return d.any(v, m)
	case wktTimestamp:
		var t time.Time
		switch x := v.(type) {
		case time.Time: // tag 0: checkItems rejects tag 1
			t = x
		case string:
			var err error
			if t, err = time.Parse(time.RFC3339Nano, x); err != nil {
				return fmt.Errorf("cborpb: %s: %w", md.FullName(), err)
			}
		default:
			return wrongType(md, "RFC 3339 time (tag 0)", v)
		}
		secs, nanos := t.Unix(), int64(t.Nanosecond())
		if secs < minTimestampSeconds || secs > maxTimestampSeconds {
			return fmt.Errorf("cborpb: %s: %v out of range", md.FullName(), t)
		}
		m.Set(fields.ByNumber(1), protoreflect.ValueOfInt64(secs))
		m.Set(fields.ByNumber(2), protoreflect.ValueOfInt32(int32(nanos)))
		return nil
	case wktDuration:
		s, ok := v.(string)
		if !ok {
			return wrongType(md, "duration text such as \"1.5s\"", v)
		}
		secs, nanos, err := parseDuration(s)
		if err != nil {
			return fmt.Errorf("cborpb: %s: %w", md.FullName(), err)
		}
		m.Set(fields.ByNumber(1), protoreflect.ValueOfInt64(secs))
		m.Set(fields.ByNumber(2), protoreflect.ValueOfInt32(nanos))
		return nil
	case wktWrapper:
		fd := fields.ByNumber(1)
		pv, err := d.singular(fd, v, nil)
		if err != nil {
			return err
		}
		m.Set(fd, pv)
		return nil
	case wktStruct, wktListValue:
		return d.field(fields.ByNumber(1), v, m)
	case wktValue:
		return d.value(v, m)
	case wktFieldMask:
		s, ok := v.(string)
		if !ok {
			return wrongType(md, "text string", v)
		}
		if s == "" {
			return nil
		}
		paths := m.Mutable(fields.ByNumber(1)).List()
		for p := range strings.SplitSeq(s, ",") {
			if strings.Contains(p, "_") {
				return fmt.Errorf("cborpb: %s: path %q is not lowerCamelCase", md.FullName(), p)
			}
			paths.Append(protoreflect.ValueOfString(snakeCase(p)))
		}
		return nil
	case wktEmpty:
		obj, ok := v.(map[string]any)
		if !ok {
			return wrongType(md, "map", v)
		}
		return d.fields(obj, m, "")
	}
	return fmt.Errorf("cborpb: unhandled well-known type %s", md.FullName())
}

// value fills a google.protobuf.Value from any CBOR value it can hold.
func (d decoder) value(v any, m protoreflect.Message) error {
	fields := m.Descriptor().Fields()
	set := func(name protoreflect.Name, pv protoreflect.Value) error {
		m.Set(fields.ByName(name), pv)
		return nil
	}
	switch x := v.(type) {
	case nil:
		return set("null_value", protoreflect.ValueOfEnum(0))
	case bool:
		return set("bool_value", protoreflect.ValueOfBool(x))
	case float64, int64, uint64:
		f, _ := float(m.Descriptor(), x)
		return set("number_value", protoreflect.ValueOfFloat64(f))
	case string:
		return set("string_value", protoreflect.ValueOfString(x))
	case map[string]any:
		fd := fields.ByName("struct_value")
		sv := m.NewField(fd)
		if err := d.message(x, sv.Message()); err != nil {
			return err
		}
		return set(fd.Name(), sv)
	case []any:
		fd := fields.ByName("list_value")
		lv := m.NewField(fd)
		if err := d.message(x, lv.Message()); err != nil {
			return err
		}
		return set(fd.Name(), lv)
	}
	return wrongType(m.Descriptor(), "null, bool, number, text, map or array", v)
}

// any reads "@type" and decodes the rest as the named message, or its
// "value" when that message is a well-known type.
func (d decoder) any(v any, m protoreflect.Message) error {
	md := m.Descriptor()
	obj, ok := v.(map[string]any)
	if !ok {
		return wrongType(md, "map", v)
	}
	if len(obj) == 0 {
		return nil
	}
	tv, ok := obj["@type"]
	if !ok {
		return fmt.Errorf("cborpb: %s: missing \"@type\"", md.FullName())
	}
	typeURL, ok := tv.(string)
	if !ok || typeURL == "" {
		return fmt.Errorf("cborpb: %s: \"@type\" must be a non-empty text string", md.FullName())
	}
	mt, err := d.resolver.FindMessageByURL(typeURL)
	if err != nil {
		return fmt.Errorf("cborpb: %s: unknown type %q", md.FullName(), typeURL)
	}
	inner := mt.New()
	if wellKnown(inner.Descriptor().FullName()) != wktNone {
		for key := range obj {
			if key != "@type" && key != "value" {
				return fmt.Errorf("cborpb: %s: unknown field %q beside a %s", md.FullName(), key, inner.Descriptor().FullName())
			}
		}
		val, ok := obj["value"]
		if !ok {
			return fmt.Errorf("cborpb: %s: missing \"value\" for %s", md.FullName(), inner.Descriptor().FullName())
		}
		err = d.message(val, inner)
	} else {
		err = d.fields(obj, inner, "@type")
	}
	if err != nil {
		return err
	}
	// Deterministic, so the same document always packs the same bytes.
	b, err := proto.MarshalOptions{Deterministic: true, AllowPartial: true}.Marshal(inner.Interface())
	if err != nil {
		return fmt.Errorf("cborpb: %s: %w", md.FullName(), err)
	}
	fields := md.Fields()
	m.Set(fields.ByNumber(1), protoreflect.ValueOfString(typeURL))
	m.Set(fields.ByNumber(2), protoreflect.ValueOfBytes(b))
	return nil
}

// parseDuration reads "[-]<seconds>[.<up to 9 digits>]s" within the range
// of google.protobuf.Duration.
func parseDuration(s string) (int64, int32, error) {
	bad := fmt.Errorf("invalid duration %q", s)
	body, ok := strings.CutSuffix(s, "s")
	if !ok {
		return 0, 0, bad
	}
	neg := strings.HasPrefix(body, "-")
	body = strings.TrimPrefix(body, "-")
	whole, frac, hasFrac := strings.Cut(body, ".")
	if whole == "" || !digits(whole) || (hasFrac && (frac == "" || len(frac) > 9 || !digits(frac))) {
		return 0, 0, bad
	}
	secs, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || secs > maxDurationSeconds {
		return 0, 0, bad
	}
	var nanos int64
	if hasFrac {
		nanos, _ = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
	}
	if neg {
		secs, nanos = -secs, -nanos
	}
	return secs, int32(nanos), nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// checkItems walks data, one well-formed CBOR data item as fxamacker has
// already checked, and rejects what the mapping never writes and the tree
// would hide: tags other than 0 (fxamacker turns tag 1 into a time, NaN
// included) and simple values other than false, true and null (undefined
// would read as null).
func checkItems(data []byte) error {
	_, err := walkItem(data, 0)
	return err
}

func walkItem(b []byte, off int) (int, error) {
	major, ai := b[off]>>5, b[off]&0x1f
	off++
	var arg uint64
	switch {
	case ai < 24:
		arg = uint64(ai)
	case ai == 24:
		arg = uint64(b[off])
		off++
	case ai == 25:
		arg = uint64(binary.BigEndian.Uint16(b[off:]))
		off += 2
	case ai == 26:
		arg = uint64(binary.BigEndian.Uint32(b[off:]))
		off += 4
	case ai == 27:
		arg = binary.BigEndian.Uint64(b[off:])
		off += 8
	}
	indefinite := ai == 31
	var err error
	switch major {
	case 2, 3: // byte and text strings
		if !indefinite {
			return off + int(arg), nil //nolint:gosec // bounded by len(b), checked by fxamacker
		}
		for b[off] != 0xff {
			if off, err = walkItem(b, off); err != nil {
				return 0, err
			}
		}
		return off + 1, nil
	case 4, 5: // arrays and maps
		items := arg
		if major == 5 {
			items *= 2
		}
		for i := uint64(0); indefinite || i < items; i++ {
			if indefinite && b[off] == 0xff {
				return off + 1, nil
			}
			if off, err = walkItem(b, off); err != nil {
				return 0, err
			}
		}
		return off, nil
	case 6:
		if arg != 0 {
			return 0, fmt.Errorf("cborpb: tag %d is not accepted (only tag 0 on timestamps)", arg)
		}
		return walkItem(b, off)
	case 7:
		if ai <= 24 && arg != 20 && arg != 21 && arg != 22 {
			return 0, fmt.Errorf("cborpb: simple value %d is not accepted", arg)
		}
	}
	return off, nil
}
