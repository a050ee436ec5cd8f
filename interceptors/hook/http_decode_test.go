package hook

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"

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

// TestHTTPAppendCallBody: the body in the request is protojson's, byte for
// byte, for tricky values.
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
	if string(got.Body) != string(want) {
		t.Errorf("got body %s, want protojson's %s", got.Body, want)
	}
}
