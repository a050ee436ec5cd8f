package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// object is a JSON object that keeps the order of its keys. Its values are
// *object, []any, string, json.Number (or any Go number, for the values
// this program adds), bool and nil.
//
// It is written here, in some 100 lines, because encoding/json's maps
// sort their keys, and the merged document's order is worth keeping: the
// OpenAPI fields in their declaration order, the operations in the order
// of the protos, which /docs shows. The ordered-map packages (wk8's,
// iancoleman's) keep the order of the top level only, or read nested
// objects as maps; a full OpenAPI model (libopenapi) is far more than
// editing a few keys needs.
type object struct {
	keys []string
	vals map[string]any
}

// obj returns an object of the key, value pairs kv.
func obj(kv ...any) *object {
	o := &object{vals: map[string]any{}}
	for i := 0; i+1 < len(kv); i += 2 {
		o.set(kv[i].(string), kv[i+1])
	}
	return o
}

// get returns the value of k, or nil.
func (o *object) get(k string) any {
	if o == nil {
		return nil
	}
	return o.vals[k]
}

// obj returns the object value of k, or nil when k holds none.
func (o *object) obj(k string) *object {
	v, _ := o.get(k).(*object)
	return v
}

// str returns the string value of k, or "".
func (o *object) str(k string) string {
	v, _ := o.get(k).(string)
	return v
}

// set gives k the value v: in its place when k is there, else last.
func (o *object) set(k string, v any) {
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

// setAfter is set, placing a new k right after the key after (last when
// after is not there).
func (o *object) setAfter(after, k string, v any) {
	if _, ok := o.vals[k]; ok {
		o.vals[k] = v
		return
	}
	i := slices.Index(o.keys, after)
	if i < 0 {
		o.set(k, v)
		return
	}
	o.keys = slices.Insert(o.keys, i+1, k)
	o.vals[k] = v
}

// readObject reads one JSON object from r.
func readObject(r io.Reader) (*object, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	v, err := readValue(dec)
	if err != nil {
		return nil, err
	}
	o, ok := v.(*object)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON object")
	}
	return o, nil
}

func readValue(dec *json.Decoder) (any, error) {
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t {
	case json.Delim('{'):
		o := obj()
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := readValue(dec)
			if err != nil {
				return nil, err
			}
			o.set(k.(string), v)
		}
		_, err := dec.Token() // }
		return o, err
	case json.Delim('['):
		a := []any{}
		for dec.More() {
			v, err := readValue(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := dec.Token() // ]
		return a, err
	}
	return t, nil
}

// write writes o as JSON indented by two spaces, as protoc-gen-openapiv3
// does, with a final newline. Text is written as it is (no \u003c for <).
func (o *object) write(w io.Writer) error {
	var b bytes.Buffer
	if err := writeValue(&b, o, "\n"); err != nil {
		return err
	}
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}

func writeValue(b *bytes.Buffer, v any, nl string) error {
	in := nl + "  "
	switch v := v.(type) {
	case *object:
		if len(v.keys) == 0 {
			b.WriteString("{}")
			return nil
		}
		b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(in)
			writeString(b, k)
			b.WriteString(": ")
			if err := writeValue(b, v.vals[k], in); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
		b.WriteString(nl + "}")
	case []any:
		if len(v) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(in)
			if err := writeValue(b, e, in); err != nil {
				return err
			}
		}
		b.WriteString(nl + "]")
	default:
		// Strings, numbers, and the Go slices and maps of the values
		// this program adds, indented alike.
		enc := json.NewEncoder(b)
		enc.SetEscapeHTML(false)
		enc.SetIndent(strings.TrimPrefix(nl, "\n"), "  ")
		if err := enc.Encode(v); err != nil {
			return err
		}
		b.Truncate(b.Len() - 1) // Encode's newline
	}
	return nil
}

func writeString(b *bytes.Buffer, s string) { _ = writeValue(b, s, "") }
