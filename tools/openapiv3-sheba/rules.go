package main

import (
	"regexp"
	"slices"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// fieldRules returns the (buf.validate.field) rules of fd, or nil.
func fieldRules(fd protoreflect.FieldDescriptor) *validate.FieldRules {
	opts, _ := fd.Options().(*descriptorpb.FieldOptions)
	r, _ := proto.GetExtension(opts, validate.E_Field).(*validate.FieldRules)
	return r
}

// applyField adds to s, the schema of fd's value in the document, the
// JSON Schema keywords that say fd's rules, and reports whether the field
// must be present: its rules say required, or they refuse its zero value,
// which proto3 JSON leaves out (an absent field is that zero value).
//
// What a keyword cannot say is left to the field's description: CEL
// expressions, prefixes and suffixes, byte lengths beyond maxLength (a
// string of at most n bytes has at most n characters; the converse is
// not so), an excluded range of numbers.
func applyField(s *object, fd protoreflect.FieldDescriptor) (required bool) {
	r := fieldRules(fd)
	if r == nil || r.GetIgnore() == validate.Ignore_IGNORE_ALWAYS {
		return false
	}
	var kw *object
	var zeroFails bool
	if fd.IsList() {
		kw, zeroFails = repeatedKeywords(s, r.GetRepeated(), fd)
	} else {
		kw, zeroFails = valueKeywords(r, fd)
	}
	// A field with presence (optional, a message) is checked only when
	// set; an ignored zero value is not checked at all.
	ignoreZero := r.GetIgnore() == validate.Ignore_IGNORE_IF_ZERO_VALUE
	switch {
	case len(kw.keys) == 0:
	case ignoreZero && zeroFails:
		// The zero value passes, whatever the keywords say of it.
		s.set("anyOf", []any{obj("const", zeroValue(fd)), kw})
	default:
		for _, k := range kw.keys {
			s.set(k, kw.vals[k])
		}
	}
	if r.GetRequired() {
		return true
	}
	return zeroFails && !ignoreZero && !fd.HasPresence()
}

// repeatedKeywords returns the keywords of a list's rules, adding those of
// its items' rules to s's items, and whether the empty list fails them.
func repeatedKeywords(s *object, r *validate.RepeatedRules, fd protoreflect.FieldDescriptor) (*object, bool) {
	kw := obj()
	if r == nil {
		return kw, false
	}
	if r.HasMinItems() {
		kw.set("minItems", r.GetMinItems())
	}
	if r.HasMaxItems() {
		kw.set("maxItems", r.GetMaxItems())
	}
	if r.GetUnique() {
		kw.set("uniqueItems", true)
	}
	if items := s.obj("items"); items != nil && r.GetItems() != nil {
		ikw, _ := valueKeywords(r.GetItems(), fd)
		for _, k := range ikw.keys {
			items.set(k, ikw.vals[k])
		}
	}
	return kw, r.GetMinItems() > 0
}

// valueKeywords returns the keywords of the rules of one value of fd (the
// field, or an item of the list it is) and whether its zero value fails
// them.
func valueKeywords(r *validate.FieldRules, fd protoreflect.FieldDescriptor) (*object, bool) {
	switch {
	case r.GetString() != nil:
		return stringKeywords(r.GetString())
	case r.GetEnum() != nil && fd.Enum() != nil:
		return enumKeywords(r.GetEnum(), fd.Enum())
	}
	return numberKeywords(r)
}

// stringFormats are the well-known string rules that JSON Schema names
// as a format.
var stringFormats = []struct {
	has    func(*validate.StringRules) bool
	format string
}{
	{(*validate.StringRules).GetUuid, "uuid"},
	{(*validate.StringRules).GetEmail, "email"},
	{(*validate.StringRules).GetHostname, "hostname"},
	{(*validate.StringRules).GetIpv4, "ipv4"},
	{(*validate.StringRules).GetIpv6, "ipv6"},
	{(*validate.StringRules).GetUri, "uri"},
	{(*validate.StringRules).GetUriRef, "uri-reference"},
}

func stringKeywords(r *validate.StringRules) (*object, bool) {
	kw := obj()
	zeroFails := false
	if r.HasConst() {
		kw.set("const", r.GetConst())
		zeroFails = r.GetConst() != ""
	}
	minLen, maxLen, hasMax := r.GetMinLen(), r.GetMaxLen(), r.HasMaxLen()
	if r.HasLen() {
		minLen, maxLen, hasMax = r.GetLen(), r.GetLen(), true
	}
	// At most n bytes is at most n characters too.
	for _, b := range []struct {
		n   uint64
		has bool
	}{{r.GetLenBytes(), r.HasLenBytes()}, {r.GetMaxBytes(), r.HasMaxBytes()}} {
		if b.has && (!hasMax || b.n < maxLen) {
			maxLen, hasMax = b.n, true
		}
	}
	if minLen > 0 {
		kw.set("minLength", minLen)
	}
	if hasMax {
		kw.set("maxLength", maxLen)
	}
	zeroFails = zeroFails || minLen > 0 || r.GetMinBytes() > 0 || r.GetLenBytes() > 0
	if r.HasPattern() {
		kw.set("pattern", r.GetPattern())
		// RE2, whose syntax the patterns share with ECMA-262's.
		if re, err := regexp.Compile(r.GetPattern()); err == nil && !re.MatchString("") {
			zeroFails = true
		}
	}
	for _, f := range stringFormats {
		if f.has(r) {
			kw.set("format", f.format)
			zeroFails = true
		}
	}
	if in := r.GetIn(); len(in) > 0 {
		kw.set("enum", in)
		zeroFails = zeroFails || !slices.Contains(in, "")
	}
	if out := r.GetNotIn(); len(out) > 0 {
		kw.set("not", obj("enum", out))
		zeroFails = zeroFails || slices.Contains(out, "")
	}
	return kw, zeroFails
}

// enumKeywords says an enum's rules by the names protojson writes, beside
// the $ref to the enum's schema, which lists its defined values
// (defined_only says no more).
func enumKeywords(r *validate.EnumRules, ed protoreflect.EnumDescriptor) (*object, bool) {
	names := func(nums []int32) []string {
		var n []string
		for _, num := range nums {
			if v := ed.Values().ByNumber(protoreflect.EnumNumber(num)); v != nil {
				n = append(n, string(v.Name()))
			}
		}
		return n
	}
	kw := obj()
	zeroFails := false
	if r.HasConst() {
		if n := names([]int32{r.GetConst()}); len(n) == 1 {
			kw.set("const", n[0])
		}
		zeroFails = r.GetConst() != 0
	}
	if in := r.GetIn(); len(in) > 0 {
		kw.set("enum", names(in))
		zeroFails = zeroFails || !slices.Contains(in, 0)
	}
	if out := r.GetNotIn(); len(out) > 0 {
		kw.set("not", obj("enum", names(out)))
		zeroFails = zeroFails || slices.Contains(out, 0)
	}
	return kw, zeroFails
}

// numberKeywords says the rules of any of the number types, whose rules
// messages share their field names (const, lt, lte, gt, gte, in, not_in).
func numberKeywords(r *validate.FieldRules) (*object, bool) {
	kw := obj()
	typ := r.ProtoReflect().WhichOneof(r.ProtoReflect().Descriptor().Oneofs().ByName("type"))
	if typ == nil || typ.Kind() != protoreflect.MessageKind {
		return kw, false
	}
	m := r.ProtoReflect().Get(typ).Message()
	get := func(name string) (float64, any, bool) {
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(name))
		if fd == nil || fd.IsList() || !m.Has(fd) {
			return 0, nil, false
		}
		v := m.Get(fd).Interface()
		return toFloat(v), v, true
	}
	if gte := m.Descriptor().Fields().ByName("gte"); gte == nil || gte.Kind() == protoreflect.MessageKind {
		return kw, false // bool, bytes, a timestamp or a duration: none said
	}
	zeroFails := false
	if c, v, ok := get("const"); ok {
		kw.set("const", v)
		zeroFails = c != 0
	}
	lo, loV, hasLo := get("gte")
	gt, gtV, hasGt := get("gt")
	hi, hiV, hasHi := get("lte")
	lt, ltV, hasLt := get("lt")
	upper, lower := hi, lo
	if hasLt {
		upper = lt
	}
	if hasGt {
		lower = gt
	}
	// An upper bound below the lower one excludes the range between them
	// (protovalidate's reading): no keyword says that but anyOf, left out.
	if (hasLo || hasGt) && (hasHi || hasLt) && upper < lower {
		return kw, zeroFails || (0 > upper && 0 < lower)
	}
	switch {
	case hasLo:
		kw.set("minimum", loV)
		zeroFails = zeroFails || lo > 0
	case hasGt:
		kw.set("exclusiveMinimum", gtV)
		zeroFails = zeroFails || gt >= 0
	}
	switch {
	case hasHi:
		kw.set("maximum", hiV)
		zeroFails = zeroFails || hi < 0
	case hasLt:
		kw.set("exclusiveMaximum", ltV)
		zeroFails = zeroFails || lt <= 0
	}
	for _, list := range []string{"in", "not_in"} {
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(list))
		l := m.Get(fd).List()
		if l.Len() == 0 {
			continue
		}
		vals := make([]any, l.Len())
		hasZero := false
		for i := range l.Len() {
			vals[i] = l.Get(i).Interface()
			hasZero = hasZero || toFloat(vals[i]) == 0
		}
		if list == "in" {
			kw.set("enum", vals)
			zeroFails = zeroFails || !hasZero
		} else {
			kw.set("not", obj("enum", vals))
			zeroFails = zeroFails || hasZero
		}
	}
	return kw, zeroFails
}

func toFloat(v any) float64 {
	switch v := v.(type) {
	case int32:
		return float64(v)
	case int64:
		return float64(v)
	case uint32:
		return float64(v)
	case uint64:
		return float64(v)
	case float32:
		return float64(v)
	case float64:
		return v
	}
	return 0
}

// zeroValue is fd's zero value as protojson writes it.
func zeroValue(fd protoreflect.FieldDescriptor) any {
	switch {
	case fd.IsList():
		return []any{}
	case fd.Kind() == protoreflect.StringKind, fd.Kind() == protoreflect.BytesKind:
		return ""
	case fd.Kind() == protoreflect.BoolKind:
		return false
	case fd.Kind() == protoreflect.EnumKind:
		return string(fd.Enum().Values().ByNumber(0).Name())
	case fd.Kind() == protoreflect.Int64Kind, fd.Kind() == protoreflect.Sint64Kind, fd.Kind() == protoreflect.Sfixed64Kind,
		fd.Kind() == protoreflect.Uint64Kind, fd.Kind() == protoreflect.Fixed64Kind:
		return "0" // protojson writes 64-bit integers as strings
	}
	return 0
}
