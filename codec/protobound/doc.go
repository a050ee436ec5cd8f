// Package protobound bounds the repeated fields of protobuf messages. It
// counts the items of each bounded field in a message's wire form, without
// unmarshalling it, and stops at the first item over the bound: a message
// that lists a million items costs a scan of a few of its bytes rather than
// a million allocations. The same bounds are checked on a message already
// decoded (from JSON or CBOR).
//
// Only the fields of the message itself are counted, not those of messages
// nested in it.
//
// Why not a library: protovalidate's repeated.max_items, and any check
// written against a decoded message, runs once the message is unmarshalled,
// which is the cost this avoids. google.golang.org/protobuf/encoding/protowire
// does the parsing; what is written here is the counting, as proto.Unmarshal
// counts items (a packed record holds several, a record of another wire type
// none).
package protobound
