package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Load returns the configuration built from Default, then the YAML file at
// path (path "" means no file: defaults only), then the environment as seen
// through lookup, which has the signature of os.LookupEnv. The result is
// validated before it is returned. Every error is an *Error.
//
// The file is decoded strictly: an unknown key, a key given twice or a value
// of the wrong type is an error naming the key. A null value counts as
// absent. Durations are Go duration strings such as "5s".
//
// Every scalar key can be overridden by SHEBA_<SECTION>_<KEY>; list keys take
// a YAML or JSON flow value. DATABASE_URL overrides database.url and wins
// over SHEBA_DATABASE_URL. Empty variables are ignored.
func Load(path string, lookup func(string) (string, bool)) (Config, error) {
	c := Default()
	if path != "" {
		if err := decodeFile(path, &c); err != nil {
			return Config{}, err
		}
	}
	fromEnv, err := applyEnv(&c, lookup)
	if err != nil {
		return Config{}, err
	}
	if e := c.check(); e != nil {
		e.Env = fromEnv[sourceKey(e.Key)]
		return Config{}, e
	}
	return c, nil
}

// databaseURLEnv is the conventional variable that overrides database.url.
const databaseURLEnv = "DATABASE_URL"

// envPrefix starts the name of every variable derived from a key.
const envPrefix = "SHEBA_"

// decodeFile decodes the YAML file at path into c, over the values already
// there.
func decodeFile(path string, c *Config) error {
	data, err := os.ReadFile(path)
	if err != nil {
		// The *PathError names the file.
		return &Error{Msg: "cannot read config file: " + err.Error()}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		// An empty file (or one with only comments) sets nothing.
		return nil
	case err != nil:
		return &Error{Msg: fmt.Sprintf("config file %s is not valid YAML: %v", path, err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return &Error{Msg: fmt.Sprintf("config file %s must hold exactly one YAML document", path)}
	}
	d := decoder{file: path}
	return d.decode(&doc, reflect.ValueOf(c).Elem(), "")
}

// applyEnv sets every key that has a non-empty variable in lookup. It
// returns, for each key it set, the variable the value came from.
func applyEnv(c *Config, lookup func(string) (string, bool)) (map[string]string, error) {
	fromEnv := make(map[string]string)
	err := walkKeys(reflect.ValueOf(c).Elem(), nil, func(path []string, v reflect.Value) error {
		key := strings.Join(path, ".")
		env := envPrefix + strings.ToUpper(strings.Join(path, "_"))
		names := []string{env}
		if key == "database.url" {
			// Applied second, so it wins.
			names = append(names, databaseURLEnv)
		}
		for _, name := range names {
			raw, ok := lookup(name)
			if !ok || raw == "" {
				continue
			}
			if err := setFromEnv(v, key, name, raw); err != nil {
				return err
			}
			fromEnv[key] = name
		}
		return nil
	})
	return fromEnv, err
}

// walkKeys calls fn for every key of the struct v that is not itself a
// section, with the path of yaml tags that leads to it.
func walkKeys(v reflect.Value, path []string, fn func(path []string, v reflect.Value) error) error {
	t := v.Type()
	for i := range t.NumField() {
		name := yamlName(t.Field(i))
		if name == "" {
			continue
		}
		p := append(path[:len(path):len(path)], name)
		f := v.Field(i)
		var err error
		if f.Kind() == reflect.Struct {
			err = walkKeys(f, p, fn)
		} else {
			err = fn(p, f)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// setFromEnv sets v, the value of key, from the variable env whose value is
// raw. Strings take raw as is; lists are parsed as a YAML (or JSON) value;
// other scalars are parsed as a plain YAML scalar.
func setFromEnv(v reflect.Value, key, env, raw string) error {
	d := decoder{env: env}
	switch v.Kind() {
	case reflect.String:
		v.SetString(raw)
		return nil
	case reflect.Slice:
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(raw), &doc); err != nil {
			return &Error{Key: key, Env: env, Msg: fmt.Sprintf("want a YAML or JSON list such as [\"a\", \"b\"]: %v", err)}
		}
		return d.decode(&doc, v, key)
	default:
		return d.decode(&yaml.Node{Kind: yaml.ScalarNode, Value: raw}, v, key)
	}
}

// sourceKey returns the key whose variable may have supplied the value at
// key: the key itself, or the list that holds it ("auth.keys[1].id" gives
// "auth.keys").
func sourceKey(key string) string {
	if i := strings.IndexByte(key, '['); i >= 0 {
		return key[:i]
	}
	return key
}

// yamlName returns the key of a struct field, or "" if it has none.
func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" || !f.IsExported() {
		return ""
	}
	return name
}

// decoder sets Go values from YAML nodes. Unlike yaml's own decoder, it
// names the full key in every error, and parses scalars the same way
// whether they come from the file or from a variable.
type decoder struct {
	file string // where the nodes come from, if a file
	env  string // where the nodes come from, if a variable
}

// decode sets v, the value of key, from n.
func (d decoder) decode(n *yaml.Node, v reflect.Value, key string) error {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil
		}
		return d.decode(n.Content[0], v, key)
	case yaml.AliasNode:
		return d.decode(n.Alias, v, key)
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil
	}

	switch {
	case v.Type() == reflect.TypeFor[time.Duration]():
		if n.Kind != yaml.ScalarNode {
			return d.errorf(n, key, "want a duration such as \"5s\", got %s", kindName(n))
		}
		dur, err := time.ParseDuration(n.Value)
		if err != nil {
			return d.errorf(n, key, "want a duration such as \"5s\" or \"1m30s\", got %q", n.Value)
		}
		v.SetInt(int64(dur))
		return nil

	case v.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return d.errorf(n, key, "want a mapping of keys to values, got %s", kindName(n))
		}
		return d.decodeStruct(n, v, key)

	case v.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return d.errorf(n, key, "want a list, got %s", kindName(n))
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, elem := range n.Content {
			if err := d.decode(elem, s.Index(i), fmt.Sprintf("%s[%d]", key, i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil

	case v.Kind() == reflect.String:
		if n.Kind != yaml.ScalarNode {
			return d.errorf(n, key, "want a string, got %s", kindName(n))
		}
		v.SetString(n.Value)
		return nil
	}

	var want string
	switch v.Kind() {
	case reflect.Bool:
		want = "true or false"
	case reflect.Int32:
		want = "a 32-bit integer"
	case reflect.Int, reflect.Int64:
		want = "an integer"
	case reflect.Float64:
		want = "a number"
	default:
		// Only reachable if Config gains a field of a new kind.
		return d.errorf(n, key, "cannot decode into a Go %s", v.Type())
	}
	if n.Kind != yaml.ScalarNode {
		return d.errorf(n, key, "want %s, got %s", want, kindName(n))
	}
	// Parse the text as a plain scalar, so that "512" in the file means
	// what 512 does and what SHEBA_..._KEY=512 does.
	plain := yaml.Node{Kind: yaml.ScalarNode, Value: n.Value}
	if err := plain.Decode(v.Addr().Interface()); err != nil {
		return d.errorf(n, key, "want %s, got %q", want, n.Value)
	}
	return nil
}

// decodeStruct sets the fields of the struct v, the value of key, from the
// mapping n.
func (d decoder) decodeStruct(n *yaml.Node, v reflect.Value, key string) error {
	t := v.Type()
	seen := make(map[string]bool)
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		name := kn.Value
		child := name
		if key != "" {
			child = key + "." + name
		}
		if kn.Kind != yaml.ScalarNode {
			return d.errorf(kn, key, "want a plain key, got %s", kindName(kn))
		}
		if seen[name] {
			return d.errorf(kn, child, "key given twice")
		}
		seen[name] = true
		field := -1
		var valid []string
		for j := range t.NumField() {
			fn := yamlName(t.Field(j))
			if fn == "" {
				continue
			}
			valid = append(valid, fn)
			if fn == name {
				field = j
			}
		}
		if field < 0 {
			return d.errorf(kn, child, "unknown key (want one of %s)", strings.Join(valid, ", "))
		}
		if err := d.decode(vn, v.Field(field), child); err != nil {
			return err
		}
	}
	return nil
}

// errorf returns an *Error for key, with the file position of n when the
// value came from a file.
func (d decoder) errorf(n *yaml.Node, key, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	if d.file != "" {
		msg += fmt.Sprintf(" (%s line %d)", d.file, n.Line)
	}
	return &Error{Key: key, Env: d.env, Msg: msg}
}

// kindName describes the shape of n for error messages.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "nothing"
}
