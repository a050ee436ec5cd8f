// Package cborpb is a grpc-gateway runtime.Marshaler for application/cbor.
//
// The CBOR document has the shape of the protobuf JSON mapping as protojson
// writes it: the same lowerCamelCase keys, enums as their names, well-known
// types in their JSON form (google.protobuf.Any as "@type" plus the fields of
// the packed message, Struct as a map, wrappers as the bare value, Duration
// and FieldMask as strings). It differs where CBOR has a better native form:
//
//   - 32- and 64-bit integers are CBOR integers, never strings;
//   - bytes are CBOR byte strings, never base64;
//   - google.protobuf.Timestamp is RFC 3339 text enclosed in tag 0;
//   - floats are CBOR floats, NaN and infinities included.
//
// Field presence follows the gateway's JSON marshaler (protojson with
// EmitDefaultValues): scalars, lists and maps are always written, default or
// empty; fields with presence (messages, oneof members, proto3 optional) are
// written only when set.
//
// Output is RFC 8949 core deterministic encoding (sorted keys, shortest
// forms, definite lengths), so one message always gives the same bytes.
//
// Decoding is strict: unknown fields, values of the wrong type, integers out
// of range, unknown enum names, duplicate keys, trailing bytes, tags other
// than 0, simple values other than false, true and null, and invalid or
// truncated CBOR are all errors (the gateway answers them 400). It accepts
// what protojson accepts beside the canonical form: proto field names,
// null for an unset field, enum numbers, and timestamps as untagged text.
// Input is bounded by the body size and by a nesting limit of 64, and never
// panics (see FuzzUnmarshal).
//
// Design: a message is first converted, by protobuf reflection alone, into a
// tree of plain Go values (map[string]any, []any, int64, string, cbor.Tag…)
// that github.com/fxamacker/cbor/v2 then encodes with its core
// deterministic options; decoding runs the other way, CBOR into such a tree
// and the tree into the message, guided by its descriptor. Going through a
// tree rather than through protojson output keeps integer, byte and time
// types exact without reparsing text, leaves the wire-level work
// (well-formedness, limits, sorting, shortest forms) to a well-kept CBOR
// library, and needs no code for new messages.
package cborpb
