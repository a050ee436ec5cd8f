package gateway

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// TestProtoJSONDecodesAsJSONPb checks that protoJSON's decoder, which
// parses a body once, decodes every body to what runtime.JSONPb's does, or
// fails with the same error.
func TestProtoJSONDecodesAsJSONPb(t *testing.T) {
	jsonpb := &runtime.JSONPb{UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false}}
	once := protoJSON{jsonpb}
	for _, body := range []string{
		"",
		" \n\t",
		"{}",
		`{"username":"ann","password":"secret"}`,
		"\n{\n  \"username\": \"ann\"\n}\n",
		`{"username":"ann"} trailing`,
		`{"username":"ann"}{"username":"bob"}`,
		`{"username":"ann","username":"bob"}`,
		`{"nope":1}`,
		`{"username":1}`,
		`{"username":"ann"`,
		"not json",
		"[]",
		"null",
		"{\"username\":\"\xff\"}",
	} {
		decode := func(m runtime.Marshaler) (*shebav1.CreateAccountRequest, error) {
			var req shebav1.CreateAccountRequest
			err := m.NewDecoder(strings.NewReader(body)).Decode(&req)
			return &req, err
		}
		want, wantErr := decode(jsonpb)
		got, gotErr := decode(once)
		if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
			t.Errorf("%q: error %v, JSONPb's %v", body, gotErr, wantErr)
		}
		if errors.Is(wantErr, io.EOF) != errors.Is(gotErr, io.EOF) {
			t.Errorf("%q: io.EOF %v, JSONPb's %v", body, errors.Is(gotErr, io.EOF), errors.Is(wantErr, io.EOF))
		}
		if gotErr == nil && !proto.Equal(got, want) {
			t.Errorf("%q: decoded %v, JSONPb %v", body, got, want)
		}
	}
}
