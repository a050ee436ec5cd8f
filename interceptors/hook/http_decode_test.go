package hook

import (
	"encoding/json"
	"fmt"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/google/go-cmp/cmp"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// plainContinueInputs are answers at the edge of httpPlainContinue's.
var plainContinueInputs = []string{
	`{"control":"continue"}`,
	" {\n\t\"control\" : \"continue\" }\r\n",
	`{"control": "continue"}`,
	`{"control":"continue"}{}`,
	`{"control":"continue"} x`,
	`{"control":"continue",}`,
	`{"control":"continue","cacheSeconds":1}`,
	"\v{\"control\":\"continue\"}",
	"\u00a0{\"control\":\"continue\"}",
	`{"control":"\u0063ontinue"}`,
	`{"Control":"continue"}`,
	`{"control":"continue"`,
	`{"control":"continue"}}`,
	`{"control":"continue" "x"}`,
	`{"control":{"break":403}}`,
	`{"control":"continue"}` + "\x00",
	``,
	`{}`,
}

// TestHTTPPlainContinue: the answers the hand-written match takes are
// those encoding/json decodes to the zero Decision, and it leaves the rest
// to encoding/json.
func TestHTTPPlainContinue(t *testing.T) {
	want := map[string]bool{
		`{"control":"continue"}`:                 true,
		" {\n\t\"control\" : \"continue\" }\r\n": true,
		`{"control": "continue"}`:                true,
	}
	for _, in := range plainContinueInputs {
		got := httpPlainContinue([]byte(in))
		if got != want[in] {
			t.Errorf("httpPlainContinue(%q) = %v, want %v", in, got, want[in])
		}
		checkPlainContinue(t, []byte(in))
	}
}

// checkPlainContinue fails when httpPlainContinue takes b and encoding/json
// does not decode it to the zero Decision.
func checkPlainContinue(t *testing.T, b []byte) {
	t.Helper()
	if !httpPlainContinue(b) {
		return
	}
	d, err := httpDecodeAnyAnswer(new(httpAnswer), b)
	if err != nil || !cmp.Equal(d, Decision{}) {
		t.Errorf("%q: matched as plain continue, but encoding/json gives %+v, %v", b, d, err)
	}
	// And the decoder the client uses says the same.
	if d, err := httpDecodeAnswer(new(httpAnswer), b); err != nil || !cmp.Equal(d, Decision{}) {
		t.Errorf("%q: httpDecodeAnswer gives %+v, %v, want the zero Decision", b, d, err)
	}
}

func FuzzHTTPPlainContinue(f *testing.F) {
	for _, in := range plainContinueInputs {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkPlainContinue(t, b) })
}

// FuzzHTTPAppendString: the request's hand-written strings read back as
// encoding/json's do, invalid UTF-8 included.
func FuzzHTTPAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "a\"b\\c\nd\x01\x7f\u2028", "caf\u00e9 \U0001F600", "bad\xffutf8\xed\xa0\x80", "<&>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := httpAppendString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("httpAppendString(%q) = %s, not a JSON string: %v", s, b, err)
		}
		ref, _ := json.Marshal(s)
		var want string
		if err := json.Unmarshal(ref, &want); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("httpAppendString(%q) reads back %q, encoding/json's %q", s, got, want)
		}
	})
}

// TestHTTPAppendCallBody: the body in the request is protojson's, for
// tricky values. (Compared as JSON values: protojson's own bytes vary from
// build to build, a space after a comma or not.)
func TestHTTPAppendCallBody(t *testing.T) {
	body := &shebav1.CreateSubscriptionRequest{AccountId: "a\"\\\n\x01\u2028\U0001F600", Plan: "caf\u00e9"}
	var buf = new(httpScratch).buf
	if err := httpAppendCall(&buf, &Call{ID: "i", Transport: TransportREST, Method: "/m", Body: body}); err != nil {
		t.Fatal(err)
	}
	var got struct{ Body json.RawMessage }
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("request %s is not JSON: %v", buf.Bytes(), err)
	}
	want, err := protojson.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	if diff := jsonDiff(t, want, got.Body); diff != "" {
		t.Errorf("body %s is not protojson's %s (-want +got):\n%s", got.Body, want, diff)
	}
}

// jsonDiff compares want and got as JSON values.
func jsonDiff(t *testing.T, want, got []byte) string {
	t.Helper()
	var w, g any
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("%s: %v", want, err)
	}
	if err := json.Unmarshal(got, &g); err != nil {
		return fmt.Sprintf("%s is not JSON: %v", got, err)
	}
	return cmp.Diff(w, g)
}

// flatTestString is a string field's value in the tests of
// httpAppendFlatMessage: every kind of escape.
const flatTestString = "a\"\\\n\t\x01\x1f\x7f<&>\u2028caf\u00e9 \U0001F600"

// fillScalars sets every singular scalar field of m and appends a value
// to every repeated string field.
func fillScalars(m protoreflect.Message) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.IsList() {
			if fd.Kind() == protoreflect.StringKind {
				m.Mutable(fd).List().Append(protoreflect.ValueOfString(flatTestString))
			}
			continue
		}
		if fd.IsMap() {
			continue
		}
		switch fd.Kind() {
		case protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString(flatTestString))
		case protoreflect.BoolKind:
			m.Set(fd, protoreflect.ValueOfBool(true))
		case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
			m.Set(fd, protoreflect.ValueOfInt32(-7))
		case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
			m.Set(fd, protoreflect.ValueOfUint32(7))
		case protoreflect.Int64Kind:
			m.Set(fd, protoreflect.ValueOfInt64(1<<60))
		case protoreflect.EnumKind:
			m.Set(fd, protoreflect.ValueOfEnum(1))
		}
	}
}

// checkFlatMessage fails when httpAppendFlatMessage takes m and writes
// other than protojson, or takes a message protojson refuses.
func checkFlatMessage(t *testing.T, m proto.Message) (flat bool) {
	t.Helper()
	got, flat := httpAppendFlatMessage([]byte("x"), m.ProtoReflect())
	want, err := protojson.Marshal(m)
	switch {
	case !flat:
	case err != nil:
		t.Errorf("%v: flat %s, protojson fails: %v", m, got, err)
	case got[0] != 'x':
		t.Errorf("%v: flat %s does not append", m, got)
	default:
		if diff := jsonDiff(t, want, got[1:]); diff != "" {
			t.Errorf("%v: flat %s, protojson %s (-protojson +flat):\n%s", m, got[1:], want, diff)
		}
	}
	return flat
}

// TestHTTPAppendFlatMessage: every request of the API, empty and with its
// fields set, is encoded as protojson encodes it; the flat ones without
// protojson.
func TestHTTPAppendFlatMessage(t *testing.T) {
	for _, s := range shebav1.Services {
		for _, method := range s.Methods {
			for _, fill := range []bool{false, true} {
				m := method.NewRequest()
				if fill {
					fillScalars(m.ProtoReflect())
				}
				flat := checkFlatMessage(t, m)
				if method.FullName == "/sheba.v1.SubscriptionService/CreateSubscription" && !flat {
					t.Errorf("%s: not flat, want flat", method.FullName)
				}
			}
		}
	}
	// Enums (known and not), a oneof, bool and uint32 fields, in messages
	// of other modules; and messages protojson has its own mapping for, or
	// refuses.
	for _, m := range []proto.Message{
		&corev3.SocketAddress{Protocol: corev3.SocketAddress_UDP, Address: flatTestString, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 1<<32 - 1}, Ipv4Compat: true},
		&corev3.SocketAddress{Protocol: corev3.SocketAddress_Protocol(99), PortSpecifier: &corev3.SocketAddress_NamedPort{NamedPort: ""}},
		&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING},
		&wrapperspb.UInt32Value{Value: 7},
		&structpb.Value{Kind: &structpb.Value_NullValue{}},
		&descriptorpb.FieldDescriptorProto{Name: proto.String("n")},
		&shebav1.CreateSubscriptionRequest{Plan: "bad\xffutf8"},
	} {
		flat := checkFlatMessage(t, m)
		if _, ok := m.(*corev3.SocketAddress); ok && !flat {
			t.Errorf("%v: not flat, want flat", m)
		}
	}
}

func FuzzHTTPAppendFlatMessage(f *testing.F) {
	f.Add(flatTestString, int32(2), uint32(7), true)
	f.Add("bad\xffutf8", int32(99), uint32(0), false)
	f.Fuzz(func(t *testing.T, s string, n int32, u uint32, b bool) {
		checkFlatMessage(t, &corev3.SocketAddress{Protocol: corev3.SocketAddress_Protocol(n), Address: s, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: u}, Ipv4Compat: b})
		checkFlatMessage(t, &shebav1.ListSubscriptionsRequest{PageSize: n, PageToken: s, Plan: s})
	})
}
