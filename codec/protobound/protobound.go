package protobound

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Bounds holds the most items that the repeated fields of some message types
// may hold. It is not changed after New and is safe for concurrent use; a
// nil *Bounds bounds nothing.
type Bounds struct {
	// messages are few (the types with a bounded field): a scan of them is
	// cheaper than a map's hash, on every message checked.
	messages []message
}

// message is a message type with a bounded field, and its bounded fields.
type message struct {
	md     protoreflect.MessageDescriptor
	fields []field
}

// field is a bounded field and its bound.
type field struct {
	fd  protoreflect.FieldDescriptor
	max int
}

// Violation is a repeated field that holds more items than its bound.
type Violation struct {
	Field protoreflect.FieldDescriptor
	Max   int
}

// New returns the bounds that maxItems gives the repeated fields (maps
// included) of the messages msgs: the most items a field may hold, or 0 for
// no bound. Messages are told apart by their descriptor: those of the
// generated types, which protoregistry and every generated message share.
func New(maxItems func(protoreflect.FieldDescriptor) int, msgs ...protoreflect.MessageDescriptor) *Bounds {
	b := &Bounds{}
	for _, md := range msgs {
		if b.fields(md) != nil {
			continue // listed twice
		}
		var fields []field
		fds := md.Fields()
		for i := range fds.Len() {
			fd := fds.Get(i)
			if fd.Cardinality() != protoreflect.Repeated {
				continue
			}
			if n := maxItems(fd); n > 0 {
				fields = append(fields, field{fd, n})
			}
		}
		if fields != nil {
			b.messages = append(b.messages, message{md, fields})
		}
	}
	return b
}

// fields returns the bounded fields of messages of type md, or nil.
func (b *Bounds) fields(md protoreflect.MessageDescriptor) []field {
	if b == nil {
		return nil
	}
	for i := range b.messages {
		if b.messages[i].md == md {
			return b.messages[i].fields
		}
	}
	return nil
}

// Has reports whether messages of type md have a bounded field: only theirs
// need checking.
func (b *Bounds) Has(md protoreflect.MessageDescriptor) bool {
	return b.fields(md) != nil
}

// CheckWire reports the first bounded field of md of which the message
// encoded in buf holds more items than its bound, found at its first item
// over it, without unmarshalling anything. A buf that does not parse
// violates nothing: unmarshalling it reports the error.
func (b *Bounds) CheckWire(md protoreflect.MessageDescriptor, buf []byte) (Violation, bool) {
	fields := b.fields(md)
	if fields == nil {
		return Violation{}, false
	}
	var small [8]int
	counts := small[:]
	if len(fields) > len(small) {
		counts = make([]int, len(fields))
	}
	for len(buf) > 0 {
		num, typ, n := protowire.ConsumeTag(buf)
		if n < 0 {
			return Violation{}, false
		}
		buf = buf[n:]
		n = protowire.ConsumeFieldValue(num, typ, buf)
		if n < 0 {
			return Violation{}, false
		}
		for i, f := range fields {
			if f.fd.Number() != num {
				continue
			}
			if counts[i] += items(f.fd, typ, buf[:n]); counts[i] > f.max {
				return Violation{Field: f.fd, Max: f.max}, true
			}
		}
		buf = buf[n:]
	}
	return Violation{}, false
}

// Check is CheckWire for a decoded message.
func (b *Bounds) Check(m protoreflect.Message) (Violation, bool) {
	for _, f := range b.fields(m.Descriptor()) {
		// Has first: Get of an empty list may allocate its view.
		if !m.Has(f.fd) {
			continue
		}
		v := m.Get(f.fd)
		n := 0
		if f.fd.IsMap() {
			n = v.Map().Len()
		} else {
			n = v.List().Len()
		}
		if n > f.max {
			return Violation{Field: f.fd, Max: f.max}, true
		}
	}
	return Violation{}, false
}

// items returns how many items of fd proto.Unmarshal reads from one record
// of wire type typ whose value is v (as protowire.ConsumeFieldValue
// delimits it): one, or those of a packed record, or none for another wire
// type, which it keeps as an unknown field.
func items(fd protoreflect.FieldDescriptor, typ protowire.Type, v []byte) int {
	want := wireType(fd.Kind())
	if typ == want {
		return 1
	}
	if typ != protowire.BytesType || fd.IsMap() || want == protowire.BytesType || want == protowire.StartGroupType {
		return 0
	}
	packed, n := protowire.ConsumeBytes(v)
	if n < 0 {
		return 0
	}
	switch want {
	case protowire.Fixed32Type:
		return len(packed) / 4
	case protowire.Fixed64Type:
		return len(packed) / 8
	}
	// Varints: each ends with the one of its bytes below 0x80.
	count := 0
	for _, c := range packed {
		if c < 0x80 {
			count++
		}
	}
	return count
}

// wireType is the wire type of one item of a field of kind k.
func wireType(k protoreflect.Kind) protowire.Type {
	switch k {
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind:
		return protowire.BytesType
	case protoreflect.GroupKind:
		return protowire.StartGroupType
	}
	return protowire.VarintType
}
