package cborpb_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/shebasvc/sheba/codec/cborpb"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// jsonView is what the gateway's JSON marshaler writes, read back with
// numbers kept as text.
func jsonView(t *testing.T, m proto.Message) any {
	t.Helper()
	b, err := protojson.MarshalOptions{EmitDefaultValues: true}.Marshal(m)
	if err != nil {
		t.Fatalf("protojson.Marshal: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode JSON: %v", err)
	}
	return v
}

// independentDecMode decodes CBOR with fxamacker's defaults, except that
// maps become map[string]any as the package documentation says.
var independentDecMode, _ = cbor.DecOptions{DefaultMapType: reflect.TypeFor[map[string]any]()}.DecMode()

// cborView decodes b independently of the package under test.
func cborView(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := independentDecMode.Unmarshal(b, &v); err != nil {
		t.Fatalf("independent CBOR decode: %v", err)
	}
	return v
}

// sameView compares the CBOR view c with the JSON view j, allowing only the
// differences the package documents: integers are numbers where JSON may have
// text, bytes are raw where JSON has base64, timestamps are tag-0 times
// (checked in diag) where JSON has text.
func sameView(t *testing.T, path string, c, j any, diag string) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("%s: %s (cbor %#v, json %#v)", path, fmt.Sprintf(format, args...), c, j)
	}
	switch cv := c.(type) {
	case nil:
		if j != nil {
			fail("cbor null, json not")
		}
	case bool:
		if jv, ok := j.(bool); !ok || jv != cv {
			fail("bool differs")
		}
	case uint64, int64:
		text := fmt.Sprint(cv)
		switch jv := j.(type) {
		case json.Number:
			if string(jv) != text {
				fail("integer differs")
			}
		case string: // 64-bit integers are text in JSON
			if jv != text {
				fail("integer differs")
			}
		default:
			fail("cbor integer, json %T", j)
		}
	case float64:
		var jf float64
		switch jv := j.(type) {
		case json.Number:
			jf, _ = strconv.ParseFloat(string(jv), 64)
		case string:
			jf, _ = strconv.ParseFloat(strings.Replace(jv, "Infinity", "Inf", 1), 64)
		default:
			fail("cbor float, json %T", j)
			return
		}
		if jf != cv && !(math.IsNaN(jf) && math.IsNaN(cv)) {
			// A float32 field is printed by protojson with float32
			// precision; compare at that precision too.
			if float32(jf) != float32(cv) {
				fail("float differs")
			}
		}
	case string:
		if jv, ok := j.(string); !ok || jv != cv {
			fail("text differs")
		}
	case []byte:
		if jv, ok := j.(string); !ok || jv != base64.StdEncoding.EncodeToString(cv) {
			fail("bytes differ from base64 text")
		}
	case time.Time:
		jv, ok := j.(string)
		if !ok {
			fail("cbor time, json %T", j)
			return
		}
		jt, err := time.Parse(time.RFC3339Nano, jv)
		if err != nil || !jt.Equal(cv) {
			fail("time differs")
		}
		// The very text protojson writes, inside tag 0.
		if !strings.Contains(diag, fmt.Sprintf("0(%q)", jv)) {
			t.Errorf("%s: %q is not in tag 0 in %s", path, jv, diag)
		}
	case map[string]any:
		jv, ok := j.(map[string]any)
		if !ok {
			fail("cbor map, json %T", j)
			return
		}
		for k := range jv {
			if _, ok := cv[k]; !ok {
				t.Errorf("%s: key %q in json only", path, k)
			}
		}
		for k, v := range cv {
			if _, ok := jv[k]; !ok {
				t.Errorf("%s: key %q in cbor only", path, k)
				continue
			}
			sameView(t, path+"."+k, v, jv[k], diag)
		}
	case []any:
		jv, ok := j.([]any)
		if !ok || len(jv) != len(cv) {
			fail("arrays differ")
			return
		}
		for i := range cv {
			sameView(t, fmt.Sprintf("%s[%d]", path, i), cv[i], jv[i], diag)
		}
	default:
		fail("unexpected CBOR value of type %T", c)
	}
}

// populate sets every field of m to a value that is not its default,
// recursing into messages up to depth.
func populate(m protoreflect.Message, depth int) {
	if m.Descriptor().FullName() == "google.protobuf.Timestamp" {
		ts := timestamppb.New(time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC))
		proto.Merge(m.Interface(), ts)
		return
	}
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if od := fd.ContainingOneof(); od != nil && m.WhichOneof(od) != nil {
			continue
		}
		switch {
		case fd.IsList():
			list := m.Mutable(fd).List()
			for range 2 {
				if v, ok := sample(fd, list.NewElement(), depth); ok {
					list.Append(v)
				}
			}
		case fd.IsMap():
			// No map fields in sheba.v1; the kitchen sink covers them.
		default:
			if v, ok := sample(fd, m.NewField(fd), depth); ok {
				m.Set(fd, v)
			}
		}
	}
}

func sample(fd protoreflect.FieldDescriptor, fresh protoreflect.Value, depth int) (protoreflect.Value, bool) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true), true
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(-123), true
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(-1 << 40), true
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(math.MaxUint32), true
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(math.MaxUint64), true
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(1.5), true
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(0.1), true
	case protoreflect.StringKind:
		if fd.ContainingMessage().FullName() == "google.protobuf.FieldMask" {
			// A path is a field name: the JSON mapping refuses others.
			return protoreflect.ValueOfString("value_of_" + string(fd.Name())), true
		}
		return protoreflect.ValueOfString("value of " + string(fd.Name())), true
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte{0, 1, 0xff}), true
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vals.Get(vals.Len() - 1).Number()), true
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if depth == 0 {
			return protoreflect.Value{}, false
		}
		populate(fresh.Message(), depth-1)
		return fresh, true
	}
	return protoreflect.Value{}, false
}

// shebaMessages returns a new, empty message of every type in sheba.v1.
func shebaMessages(t *testing.T) []protoreflect.MessageType {
	t.Helper()
	var out []protoreflect.MessageType
	protoregistry.GlobalFiles.RangeFilesByPackage("sheba.v1", func(fd protoreflect.FileDescriptor) bool {
		msgs := fd.Messages()
		for i := range msgs.Len() {
			mt, err := protoregistry.GlobalTypes.FindMessageByName(msgs.Get(i).FullName())
			if err != nil {
				t.Fatalf("find %s: %v", msgs.Get(i).FullName(), err)
			}
			out = append(out, mt)
		}
		return true
	})
	if len(out) < 10 {
		t.Fatalf("found %d sheba.v1 messages, want all of them", len(out))
	}
	// The reference keeps the generated package linked in.
	_ = shebav1.File_sheba_v1_subscription_proto
	return out
}

func badRequestStatus(t testing.TB) *status.Status {
	t.Helper()
	st, err := status.New(codes.InvalidArgument, "invalid plan").WithDetails(&errdetails.BadRequest{
		FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: "plan", Description: "must be 1-64 of a-z 0-9 -"},
			{Field: "account_id", Description: "must be a UUID"},
		},
	})
	if err != nil {
		t.Fatalf("status with details: %v", err)
	}
	return st
}

const kitchenJSON = `{
	"fInt32": -7, "fInt64": "-9007199254740993", "fUint32": 4294967295,
	"fUint64": "18446744073709551615", "fSint32": -2147483648,
	"fSint64": "-9223372036854775808", "fFixed32": 7, "fFixed64": "8",
	"fSfixed32": -9, "fSfixed64": "-10", "fFloat": 1.5, "fDouble": 0.1,
	"fBool": true, "fString": "héllo", "fBytes": "AAEC/w==",
	"color": "COLOR_RED", "inner": {"name": "in", "nums": ["1", "-2"]},
	"names": ["a", "b"], "inners": [{"name": "x"}, {}],
	"byName": {"a": "1", "b": "-2"}, "byInt": {"1": "one", "-5": "minus five"},
	"byBool": {"true": {"name": "t"}}, "choiceInner": {"name": "c"}, "opt": 0,
	"ts": "2025-01-02T03:04:05.123456789Z", "dur": "-1.500s",
	"any": {"@type": "type.googleapis.com/google.rpc.BadRequest",
		"fieldViolations": [{"field": "plan", "description": "bad"}]},
	"st": {"k": [1, "two", null, {"x": true}], "n": 2.5},
	"val": 2.5, "lv": [1, "a"], "w64": "42", "wbytes": "aGk=", "wstring": "",
	"fm": "fInt32,inner.name", "empty": {},
	"stamps": ["1970-01-01T00:00:00Z", "2000-02-29T12:00:00.500Z"],
	"vals": [null, true, "s", -0.5],
	"anyWkt": {"@type": "type.googleapis.com/google.protobuf.Duration", "value": "3s"},
	"colors": ["COLOR_RED", 7]
}`

func testMessages(t *testing.T) map[string]proto.Message {
	t.Helper()
	msgs := map[string]proto.Message{}
	for _, mt := range shebaMessages(t) {
		name := string(mt.Descriptor().FullName())
		msgs[name+"/empty"] = mt.New().Interface()
		full := mt.New()
		populate(full, 3)
		msgs[name+"/full"] = full.Interface()
	}
	msgs["google.rpc.Status/BadRequest"] = badRequestStatus(t).Proto()

	sink := kitchenSink(t)
	msgs["kitchen/empty"] = sink.New().Interface()
	full := sink.New().Interface()
	if err := protojson.Unmarshal([]byte(kitchenJSON), full); err != nil {
		t.Fatalf("protojson.Unmarshal kitchen sink: %v", err)
	}
	msgs["kitchen/full"] = full
	return msgs
}

func TestRoundTrip(t *testing.T) {
	m := &cborpb.Marshaler{}
	for name, msg := range testMessages(t) {
		t.Run(name, func(t *testing.T) {
			b, err := m.Marshal(msg)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			got := msg.ProtoReflect().Type().New().Interface()
			if err := m.Unmarshal(b, got); err != nil {
				t.Fatalf("Unmarshal: %v\n%s", err, diagnose(b))
			}
			if diff := cmp.Diff(msg, got, protocmp.Transform()); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
			// Through the gateway's streaming interfaces too.
			var buf bytes.Buffer
			if err := m.NewEncoder(&buf).Encode(msg); err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if !bytes.Equal(buf.Bytes(), b) {
				t.Errorf("Encode wrote other bytes than Marshal")
			}
			got2 := msg.ProtoReflect().Type().New().Interface()
			if err := m.NewDecoder(&buf).Decode(got2); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !proto.Equal(got, got2) {
				t.Errorf("Decode differs from Unmarshal")
			}
		})
	}
}

func TestSameViewAsJSON(t *testing.T) {
	m := &cborpb.Marshaler{}
	for name, msg := range testMessages(t) {
		t.Run(name, func(t *testing.T) {
			b, err := m.Marshal(msg)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			sameView(t, "$", cborView(t, b), jsonView(t, msg), diagnose(b))
		})
	}
}

// TestSubscriptionShape pins the document on one concrete answer, byte for
// byte where its shape is fixed.
func TestSubscriptionShape(t *testing.T) {
	sub := &shebav1.Subscription{
		Id:         "1f0c",
		AccountId:  "a1",
		Plan:       "pro",
		Status:     shebav1.SubscriptionStatus_SUBSCRIPTION_STATUS_ACTIVE,
		CreateTime: timestamppb.New(time.Date(2025, 1, 2, 3, 4, 5, 500_000_000, time.UTC)),
		Etag:       "dFm2Ea0WNy7Pz1jj",
	}
	b, err := (&cborpb.Marshaler{}).Marshal(sub)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id": "1f0c", "etag": "dFm2Ea0WNy7Pz1jj", "plan": "pro", "status": "SUBSCRIPTION_STATUS_ACTIVE", "accountId": "a1", "createTime": 0("2025-01-02T03:04:05.500Z")}`
	if got := diagnose(b); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}

	page, err := (&cborpb.Marshaler{}).Marshal(&shebav1.ListSubscriptionsRequest{PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	want = `{"plan": "", "pageSize": 1000, "pageToken": ""}`
	if got := diagnose(page); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func diagnose(b []byte) string {
	s, err := cbor.Diagnose(b)
	if err != nil {
		return fmt.Sprintf("<%v: % x>", err, b)
	}
	return s
}

func TestDeterministic(t *testing.T) {
	m := &cborpb.Marshaler{}
	// Re-encoding with fxamacker's core deterministic options must give
	// the same bytes: keys sorted, shortest forms, definite lengths.
	// Times decode as time.Time and are re-encoded in tag 0 with
	// RFC3339Nano, which writes the same text as long as the nanoseconds
	// have no trailing zeros, which holds for the populated messages.
	opts := cbor.CoreDetEncOptions()
	opts.Time = cbor.TimeRFC3339Nano
	opts.TimeTag = cbor.EncTagRequired
	reenc, err := opts.EncMode()
	if err != nil {
		t.Fatal(err)
	}
	for name, msg := range testMessages(t) {
		if strings.HasPrefix(name, "kitchen") {
			continue // its timestamps have trailing zeros on purpose
		}
		t.Run(name, func(t *testing.T) {
			a, err := m.Marshal(msg)
			if err != nil {
				t.Fatal(err)
			}
			b, err := m.Marshal(proto.Clone(msg))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a, b) {
				t.Fatalf("two encodings differ:\n%x\n%x", a, b)
			}
			c, err := reenc.Marshal(cborView(t, a))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a, c) {
				t.Errorf("not core deterministic:\ngot  %s\nwant %s", diagnose(a), diagnose(c))
			}
		})
	}
}

// enc encodes a test input with plain fxamacker.
func enc(t *testing.T, v any) []byte {
	t.Helper()
	b, err := cbor.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestUnmarshalLenient(t *testing.T) {
	m := &cborpb.Marshaler{}
	for _, tc := range []struct {
		name string
		in   any
		want proto.Message
	}{
		{"proto field name", map[string]any{"page_size": 5}, &shebav1.ListSubscriptionsRequest{PageSize: 5}},
		{"null is unset", map[string]any{"pageSize": nil, "plan": "pro"}, &shebav1.ListSubscriptionsRequest{Plan: "pro"}},
		{"enum by number", map[string]any{"status": 2}, &shebav1.Subscription{Status: shebav1.SubscriptionStatus_SUBSCRIPTION_STATUS_CANCELED}},
		{"untagged timestamp text", map[string]any{"createTime": "2025-01-02T03:04:05Z"},
			&shebav1.Subscription{CreateTime: timestamppb.New(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))}},
		{"indefinite length", []byte{0xbf, 0x64, 'p', 'l', 'a', 'n', 0x63, 'p', 'r', 'o', 0xff}, &shebav1.ListSubscriptionsRequest{Plan: "pro"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, ok := tc.in.([]byte)
			if !ok {
				in = enc(t, tc.in)
			}
			got := tc.want.ProtoReflect().Type().New().Interface()
			if err := m.Unmarshal(in, got); err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestUnmarshalBadInput(t *testing.T) {
	m := &cborpb.Marshaler{}
	valid := enc(t, map[string]any{"plan": "pro", "pageSize": 10})
	nested := bytes.Repeat([]byte{0x81}, 200) // 200 arrays deep
	nested = append(nested, 0x00)
	sink := kitchenSink(t)
	for _, tc := range []struct {
		name   string
		in     any
		target proto.Message
	}{
		{"empty", []byte{}, &shebav1.ListSubscriptionsRequest{}},
		{"truncated", valid[:len(valid)-1], &shebav1.ListSubscriptionsRequest{}},
		{"only a map header", []byte{0xa2}, &shebav1.ListSubscriptionsRequest{}},
		{"reserved byte", []byte{0x1c}, &shebav1.ListSubscriptionsRequest{}},
		{"break outside indefinite", []byte{0xff}, &shebav1.ListSubscriptionsRequest{}},
		{"trailing bytes", append(append([]byte{}, valid...), 0x00), &shebav1.ListSubscriptionsRequest{}},
		{"huge declared array", []byte{0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, &shebav1.ListSubscriptionsRequest{}},
		{"huge declared text", []byte{0xa1, 0x7b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, &shebav1.ListSubscriptionsRequest{}},
		{"too deep", nested, &shebav1.ListSubscriptionsRequest{}},
		{"not a map", []any{"plan"}, &shebav1.ListSubscriptionsRequest{}},
		{"null message", nil, &shebav1.ListSubscriptionsRequest{}},
		{"unknown field", map[string]any{"plan": "pro", "nope": 1}, &shebav1.ListSubscriptionsRequest{}},
		{"non-text key", map[any]any{1: "pro"}, &shebav1.ListSubscriptionsRequest{}},
		{"duplicate key", []byte{0xa2, 0x64, 'p', 'l', 'a', 'n', 0x61, 'a', 0x64, 'p', 'l', 'a', 'n', 0x61, 'b'}, &shebav1.ListSubscriptionsRequest{}},
		{"json and proto name both", map[string]any{"pageSize": 1, "page_size": 2}, &shebav1.ListSubscriptionsRequest{}},
		{"invalid utf-8", map[string]any{"plan": cbor.RawMessage{0x62, 0xff, 0xfe}}, &shebav1.ListSubscriptionsRequest{}},
		{"text for int32", map[string]any{"pageSize": "10"}, &shebav1.ListSubscriptionsRequest{}},
		{"float for int32", map[string]any{"pageSize": 1.5}, &shebav1.ListSubscriptionsRequest{}},
		{"int32 overflow", map[string]any{"pageSize": int64(1) << 31}, &shebav1.ListSubscriptionsRequest{}},
		{"int32 underflow", map[string]any{"pageSize": -(int64(1) << 31) - 1}, &shebav1.ListSubscriptionsRequest{}},
		{"bignum for int32", map[string]any{"pageSize": cbor.Tag{Number: 2, Content: []byte{1, 0, 0, 0, 0, 0, 0, 0, 0}}}, &shebav1.ListSubscriptionsRequest{}},
		{"int for text", map[string]any{"plan": 5}, &shebav1.ListSubscriptionsRequest{}},
		{"bytes for text", map[string]any{"plan": []byte("pro")}, &shebav1.ListSubscriptionsRequest{}},
		{"array for text", map[string]any{"plan": []any{"pro"}}, &shebav1.ListSubscriptionsRequest{}},
		{"unknown tag on text", map[string]any{"plan": cbor.Tag{Number: 42, Content: "pro"}}, &shebav1.ListSubscriptionsRequest{}},
		{"undefined", map[string]any{"plan": cbor.SimpleValue(23)}, &shebav1.ListSubscriptionsRequest{}},
		{"simple value", map[string]any{"plan": cbor.SimpleValue(99)}, &shebav1.ListSubscriptionsRequest{}},
		{"unknown enum name", map[string]any{"status": "SUBSCRIPTION_STATUS_NOPE"}, &shebav1.Subscription{}},
		{"enum as bool", map[string]any{"status": true}, &shebav1.Subscription{}},
		{"timestamp as int", map[string]any{"createTime": 12}, &shebav1.Subscription{}},
		{"timestamp bad text", map[string]any{"createTime": "yesterday"}, &shebav1.Subscription{}},
		{"timestamp bad tag 0 text", map[string]any{"createTime": cbor.Tag{Number: 0, Content: "yesterday"}}, &shebav1.Subscription{}},
		{"timestamp tag 0 on int", map[string]any{"createTime": cbor.Tag{Number: 0, Content: 5}}, &shebav1.Subscription{}},
		{"timestamp year 0", map[string]any{"createTime": cbor.Tag{Number: 0, Content: "0000-01-01T00:00:00Z"}}, &shebav1.Subscription{}},
		{"timestamp epoch (tag 1)", map[string]any{"createTime": cbor.Tag{Number: 1, Content: 1735787045}}, &shebav1.Subscription{}},
		{"timestamp NaN epoch", map[string]any{"createTime": cbor.Tag{Number: 1, Content: math.NaN()}}, &shebav1.Subscription{}},
		{"timestamp huge epoch", map[string]any{"createTime": cbor.Tag{Number: 1, Content: 1e300}}, &shebav1.Subscription{}},
		{"message as text", map[string]any{"subscriptions": []any{"x"}}, &shebav1.ListSubscriptionsResponse{}},
		{"null in list", map[string]any{"subscriptions": []any{nil}}, &shebav1.ListSubscriptionsResponse{}},
		{"list as map", map[string]any{"subscriptions": map[string]any{}}, &shebav1.ListSubscriptionsResponse{}},
		{"any without @type", map[string]any{"details": []any{map[string]any{"field": "x"}}}, &spb.Status{}},
		{"any unknown type", map[string]any{"code": 3, "details": []any{map[string]any{"@type": "type.googleapis.com/no.Such"}}}, &spb.Status{}},
		{"any @type not text", map[string]any{"details": []any{map[string]any{"@type": 1}}}, &spb.Status{}},
		{"any unknown inner field", map[string]any{"details": []any{map[string]any{
			"@type": "type.googleapis.com/google.rpc.BadRequest", "nope": 1}}}, &spb.Status{}},
		{"kitchen negative uint32", map[string]any{"fUint32": -1}, sink.New().Interface()},
		{"kitchen uint32 overflow", map[string]any{"fUint32": uint64(1) << 32}, sink.New().Interface()},
		{"kitchen int64 overflow", map[string]any{"fInt64": uint64(1) << 63}, sink.New().Interface()},
		{"kitchen float overflow", map[string]any{"fFloat": 1e300}, sink.New().Interface()},
		{"kitchen text for bytes", map[string]any{"fBytes": "AAE="}, sink.New().Interface()},
		{"kitchen oneof twice", map[string]any{"choiceText": "a", "choiceInner": map[string]any{}}, sink.New().Interface()},
		{"kitchen bad map key", map[string]any{"byInt": map[string]any{"x": "y"}}, sink.New().Interface()},
		{"kitchen bad bool key", map[string]any{"byBool": map[string]any{"yes": map[string]any{}}}, sink.New().Interface()},
		{"kitchen null map value", map[string]any{"byName": map[string]any{"a": nil}}, sink.New().Interface()},
		{"kitchen bad duration", map[string]any{"dur": "1.5"}, sink.New().Interface()},
		{"kitchen duration too long", map[string]any{"dur": "315576000001s"}, sink.New().Interface()},
		{"kitchen duration 10 digits", map[string]any{"dur": "1.0000000001s"}, sink.New().Interface()},
		{"kitchen snake field mask", map[string]any{"fm": "f_int32"}, sink.New().Interface()},
		{"kitchen wkt any without value", map[string]any{"anyWkt": map[string]any{"@type": "type.googleapis.com/google.protobuf.Duration"}}, sink.New().Interface()},
		{"kitchen wkt any extra key", map[string]any{"anyWkt": map[string]any{"@type": "type.googleapis.com/google.protobuf.Duration", "value": "1s", "x": 1}}, sink.New().Interface()},
		{"kitchen value of bytes", map[string]any{"val": []byte{1}}, sink.New().Interface()},
		{"kitchen struct non-map", map[string]any{"st": []any{}}, sink.New().Interface()},
		{"kitchen empty with field", map[string]any{"empty": map[string]any{"x": 1}}, sink.New().Interface()},
		{"kitchen wrapper wrong type", map[string]any{"w64": "42"}, sink.New().Interface()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, ok := tc.in.([]byte)
			if !ok {
				in = enc(t, tc.in)
			}
			err := m.Unmarshal(in, tc.target)
			if err == nil {
				t.Fatalf("Unmarshal(%s) succeeded, want an error", diagnose(in))
			}
			// Through the gateway's path, only an empty body may read
			// as io.EOF.
			derr := m.NewDecoder(bytes.NewReader(in)).Decode(tc.target)
			if gotEOF, wantEOF := errors.Is(derr, io.EOF), len(in) == 0; gotEOF != wantEOF || derr == nil {
				t.Errorf("Decode: got %v, want io.EOF: %v", derr, wantEOF)
			}
		})
	}
}

func TestNonProtoValues(t *testing.T) {
	m := &cborpb.Marshaler{}
	b, err := m.Marshal("pro")
	if err != nil {
		t.Fatal(err)
	}
	var s string
	if err := m.Unmarshal(b, &s); err != nil || s != "pro" {
		t.Errorf("got %q, %v; want %q", s, err, "pro")
	}
	if got := m.ContentType(nil); got != "application/cbor" {
		t.Errorf("ContentType: got %q", got)
	}
}

func TestUnsetWellKnownValueIsAnError(t *testing.T) {
	sink := kitchenSink(t).New()
	val := sink.Descriptor().Fields().ByName("val")
	sink.Set(val, sink.NewField(val)) // a Value with no kind
	if _, err := (&cborpb.Marshaler{}).Marshal(sink.Interface()); err == nil {
		t.Error("Marshal of a Value with no kind succeeded")
	}
	if _, err := protojson.Marshal(sink.Interface()); err == nil {
		t.Error("protojson agrees it is an error; the test is stale")
	}
}

func listResponse(n int) *shebav1.ListSubscriptionsResponse {
	resp := &shebav1.ListSubscriptionsResponse{NextPageToken: "eyJ0IjoiMjAyNS0wMS0wMlQwMzowNDowNVoiLCJpZCI6IjAxOTRmZjAwIn0"}
	base := time.Date(2025, 1, 2, 3, 4, 5, 123456000, time.UTC)
	for i := range n {
		s := &shebav1.Subscription{
			Id:         fmt.Sprintf("0194ff00-0000-7000-8000-%012d", i),
			AccountId:  fmt.Sprintf("0194fe00-0000-7000-8000-%012d", i),
			Plan:       "pro-monthly",
			Status:     shebav1.SubscriptionStatus_SUBSCRIPTION_STATUS_ACTIVE,
			CreateTime: timestamppb.New(base.Add(-time.Duration(i) * time.Minute)),
		}
		if i%3 == 0 {
			s.Status = shebav1.SubscriptionStatus_SUBSCRIPTION_STATUS_CANCELED
			s.CancelTime = timestamppb.New(base)
		}
		resp.Subscriptions = append(resp.Subscriptions, s)
	}
	return resp
}

func BenchmarkMarshal(b *testing.B) {
	resp := listResponse(50)
	b.Run("cbor/ListSubscriptions50", func(b *testing.B) {
		m := &cborpb.Marshaler{}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := m.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The JSON marshaler of the gateway, for scale.
	b.Run("protojson/ListSubscriptions50", func(b *testing.B) {
		o := protojson.MarshalOptions{EmitDefaultValues: true}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := o.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkUnmarshal(b *testing.B) {
	m := &cborpb.Marshaler{}
	data, err := m.Marshal(listResponse(50))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		var resp shebav1.ListSubscriptionsResponse
		if err := m.Unmarshal(data, &resp); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDecodeLimits checks that Limits refuse inputs over them that the
// defaults accept, and still accept what fits.
func TestDecodeLimits(t *testing.T) {
	tight := &cborpb.Marshaler{Limits: cborpb.DecodeLimits{MaxNesting: 4, MaxArrayElements: 16, MaxMapPairs: 16}}
	pairs := map[string]any{"plan": "pro"}
	for i := range 20 {
		pairs[fmt.Sprintf("x%d", i)] = nil
	}
	long := make([]any, 17)
	deep := any("pro")
	for range 5 {
		deep = []any{deep}
	}
	for _, tc := range []struct {
		name string
		in   any
	}{
		{"21 map pairs", pairs},
		{"17 array elements", map[string]any{"plan": long}},
		{"nested 6 deep", map[string]any{"plan": deep}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := enc(t, tc.in)
			var tree any
			if err := (&cborpb.Marshaler{}).Unmarshal(in, &tree); err != nil {
				t.Fatalf("default limits refuse it: %v", err)
			}
			err := tight.Unmarshal(in, &shebav1.ListSubscriptionsRequest{})
			if err == nil || !strings.Contains(err.Error(), "exceeded max") {
				t.Errorf("got %v, want an error saying a limit is exceeded", err)
			}
		})
	}
	var got shebav1.ListSubscriptionsRequest
	if err := tight.Unmarshal(enc(t, map[string]any{"plan": "pro", "pageSize": 10}), &got); err != nil || got.GetPlan() != "pro" {
		t.Errorf("a valid request under tight limits: got %v, %v", &got, err)
	}
	bad := &cborpb.Marshaler{Limits: cborpb.DecodeLimits{MaxArrayElements: 1}}
	if err := bad.Unmarshal(enc(t, map[string]any{}), &got); err == nil {
		t.Error("invalid limits: Unmarshal succeeded, want an error")
	}
}

// TestUnmarshalMessageField checks a decode into a pointer to a message
// pointer, what grpc-gateway hands the decoder for an HTTP rule whose
// body is one message field of the request: the message is made and
// decoded by the protobuf mapping (enums by name), as JSONPb does.
func TestUnmarshalMessageField(t *testing.T) {
	data, err := cbor.Marshal(map[string]any{"name": "plan", "type": "TYPE_STRING", "jsonName": "plan"})
	if err != nil {
		t.Fatal(err)
	}
	var field *descriptorpb.FieldDescriptorProto
	if err := (&cborpb.Marshaler{}).NewDecoder(bytes.NewReader(data)).Decode(&field); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	want := &descriptorpb.FieldDescriptorProto{Name: proto.String("plan"), Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(), JsonName: proto.String("plan")}
	if diff := cmp.Diff(want, field, protocmp.Transform()); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}
	status, err := cbor.Marshal(map[string]any{"code": 3, "message": "m", "details": []any{}})
	if err != nil {
		t.Fatal(err)
	}
	st := &spb.Status{Message: "old"}
	if err := (&cborpb.Marshaler{}).Unmarshal(status, &st); err != nil || st.GetCode() != 3 || st.GetMessage() != "m" {
		t.Errorf("into a set pointer: got %v, %v; want code 3, message m", st, err)
	}
}
