package gateway_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/shebasvc/sheba/e2e/resttest"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/server/gateway"
)

// The guards of the browser protocols (browser.go), without a database: a
// bare grpc.Server whose AccountService answers CreateAccount with the
// username it was sent, behind gateway.New, with an Authenticator for which
// browserTestKey is the one key and Ping the one public method. What
// needs the chain (its errors, metrics, logs) is tested in e2e.

// browserTestKey is the key of browserAuth.
const browserTestKey = "browser-test-key"

type browserAuth struct{}

func (browserAuth) Known(apiKey, _ string) bool { return apiKey == browserTestKey }
func (browserAuth) Public(method string) bool   { return method == "/sheba.v1.PingService/Ping" }

// echoAccounts answers CreateAccount with an account of the username sent.
type echoAccounts struct {
	shebav1.UnimplementedAccountServiceServer
}

func (echoAccounts) CreateAccount(_ context.Context, req *shebav1.CreateAccountRequest) (*shebav1.CreateAccountResponse, error) {
	return &shebav1.CreateAccountResponse{Account: &shebav1.Account{Username: req.GetUsername()}}, nil
}

// bothWays runs test against the gateway served through vanguard and by
// connect-go's handlers.
func bothWays(t *testing.T, test func(t *testing.T, url string)) {
	for _, way := range []struct {
		name      string
		connectGo bool
	}{{"vanguard", false}, {"connect-go", true}} {
		t.Run(way.name, func(t *testing.T) {
			t.Parallel()
			test(t, newBrowserGateway(t, way.connectGo))
		})
	}
}

// browserLimit is the body limit of newBrowserGateway: a gRPC-Web frame of
// a message of this size is 70 bytes, whose base64 ends in padding.
const browserLimit = 65

// newBrowserGateway serves the gateway over a bare grpc.Server (through
// vanguard) or, with connectGo, over a Channel with the same service (by
// connect-go's handlers: Options.ConnectHandlers), and returns its URL.
func newBrowserGateway(t *testing.T, connectGo bool) string {
	t.Helper()
	// The service is on the way the calls go, and only there.
	srv, channel := grpc.NewServer(), gateway.NewChannel(nil)
	if connectGo {
		shebav1.RegisterAccountServiceServer(channel, echoAccounts{})
	} else {
		shebav1.RegisterAccountServiceServer(srv, echoAccounts{})
	}
	h, err := gateway.New(t.Context(), channel, gateway.Options{
		MaxBodyBytes:        browserLimit,
		MaxConcurrentBodies: 4,
		Authenticator:       browserAuth{},
		GRPC:                srv,
		ConnectHandlers:     connectGo,
	})
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return hs.URL
}

const createAccount = "/sheba.v1.AccountService/CreateAccount"

// browserResult is an answer of the gateway: its HTTP status and headers,
// the status it carries (nil on success) and, on success, the username of
// the account CreateAccount answered.
type browserResult struct {
	code     int
	header   http.Header
	st       *status.Status
	username string
	body     []byte
}

// browserPost sends body to path with the given Content-Type and headers
// (name, value pairs; "chunked" as the name sends the body without a
// length), with browserTestKey, and reads the answer in the format of
// the protocol of contentType (or REST's, for a type no protocol has).
func browserPost(t *testing.T, url, method, path, contentType string, body []byte, header ...string) browserResult {
	t.Helper()
	var rd io.Reader = bytes.NewReader(body)
	req, err := http.NewRequestWithContext(t.Context(), method, url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("X-Api-Key", browserTestKey)
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "chunked" {
			req.Body, req.ContentLength = io.NopCloser(io.MultiReader(rd)), -1
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	res := browserResult{code: resp.StatusCode, header: resp.Header, body: raw}
	ct := resp.Header.Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "application/grpc-web"):
		if strings.HasPrefix(ct, "application/grpc-web-text") {
			if raw, err = base64.StdEncoding.DecodeString(string(raw)); err != nil {
				t.Fatalf("answer %q: %v", res.body, err)
			}
		}
		res.st, res.username = grpcWebAnswer(t, resp.Header, raw)
	case strings.HasPrefix(ct, "application/connect+"):
		// A stream refused: its one envelope is the end of the stream
		// (flag 2), whose JSON holds the error.
		if len(raw) < 5 || raw[0] != 2 {
			t.Fatalf("Connect stream answer %q: want one end-of-stream envelope", raw)
		}
		var end struct {
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(raw[5:], &end); err != nil {
			t.Fatalf("Connect end of stream %q: %v", raw[5:], err)
		}
		res.st = resttest.ConnectStatus(t, end.Error)
	case resp.StatusCode == http.StatusOK:
		var msg shebav1.CreateAccountResponse
		if ct == "application/json" {
			err = protojson.Unmarshal(raw, &msg)
		} else {
			err = proto.Unmarshal(raw, &msg)
		}
		if err != nil {
			t.Fatalf("answer %q: %v", raw, err)
		}
		res.username = msg.GetAccount().GetUsername()
	case bytes.HasPrefix(raw, []byte(`{"code":"`)):
		// Connect's error, whose code is a name, where REST's is a number.
		res.st = resttest.ConnectStatus(t, raw)
	default:
		var p spb.Status
		if err := protojson.Unmarshal(raw, &p); err != nil {
			t.Fatalf("REST error %q: %v", raw, err)
		}
		res.st = status.FromProto(&p)
	}
	return res
}

// grpcWebAnswer reads a binary gRPC-Web answer: its status from the
// headers (an error without a message) or the trailer frame, and the
// message's username.
func grpcWebAnswer(t *testing.T, h http.Header, data []byte) (*status.Status, string) {
	t.Helper()
	trailers := h.Clone()
	var username string
	for len(data) >= 5 {
		flag, n := data[0], binary.BigEndian.Uint32(data[1:5])
		payload := data[5 : 5+n]
		data = data[5+n:]
		if flag&0x80 != 0 {
			for line := range strings.SplitSeq(strings.TrimSpace(string(payload)), "\r\n") {
				k, v, _ := strings.Cut(line, ":")
				trailers.Set(k, strings.TrimSpace(v))
			}
			continue
		}
		var msg shebav1.CreateAccountResponse
		if err := proto.Unmarshal(payload, &msg); err != nil {
			t.Fatalf("message: %v", err)
		}
		username = msg.GetAccount().GetUsername()
	}
	return resttest.GRPCWebStatus(t, trailers), username
}

// grpcWebFrame is msg in a gRPC-Web frame of flag.
func grpcWebFrame(flag byte, msg []byte) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{flag}, uint32(len(msg))), msg...)
}

// createBody is a CreateAccountRequest of a username of n bytes, marshaled:
// n+2 bytes, for n < 128.
func createBody(t *testing.T, n int) []byte {
	t.Helper()
	b, err := proto.Marshal(&shebav1.CreateAccountRequest{Username: strings.Repeat("u", n)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBrowserGuardsUnit: what does not decode is INVALID_ARGUMENT
// MALFORMED_BODY (Connect: 400) and never INTERNAL; every answer of the
// guards, in each protocol's format, carries exactly one ErrorInfo.
func TestBrowserGuardsUnit(t *testing.T) { bothWays(t, testBrowserGuardsUnit) }

func testBrowserGuardsUnit(t *testing.T, url string) {
	valid := createBody(t, 3)
	garbage := []byte("\xff\xff\xff")
	// A username that is not UTF-8, which proto3 refuses.
	notUTF8 := []byte("\x0a\x02\xff\xfe")
	const (
		proto, jsonType = "application/proto", "application/json"
		web, text       = "application/grpc-web+proto", "application/grpc-web-text"
		// Connect's streaming type of protobuf.
		connectStream = "application/connect+proto"
	)
	b64 := func(b []byte) []byte { return []byte(base64.StdEncoding.EncodeToString(b)) }
	for _, test := range []struct {
		name        string
		method      string
		contentType string
		body        []byte
		header      []string
		httpCode    int
		code        codes.Code
		why         string
	}{
		{"proto garbage", "", proto, garbage, nil, http.StatusBadRequest, codes.InvalidArgument, reason.MalformedBody},
		{"proto not UTF-8", "", proto, notUTF8, nil, http.StatusBadRequest, codes.InvalidArgument, reason.MalformedBody},
		{"proto garbage, gzip", "", proto, gzipBytes(t, garbage), []string{"Content-Encoding", "gzip"}, http.StatusBadRequest, codes.InvalidArgument, reason.MalformedBody},
		{"proto not gzip", "", proto, valid, []string{"Content-Encoding", "gzip"}, http.StatusBadRequest, codes.InvalidArgument, reason.MalformedBody},
		{"proto zstd", "", proto, valid, []string{"Content-Encoding", "zstd"}, http.StatusBadRequest, codes.InvalidArgument, reason.UnsupportedContentEncoding},
		{"proto gzip past the limit", "", proto, gzipBytes(t, createBody(t, 100)), []string{"Content-Encoding", "gzip"}, http.StatusTooManyRequests, codes.ResourceExhausted, reason.BodyTooLarge},
		{"proto bad timeout", "", proto, valid, []string{"Connect-Timeout-Ms", "soon"}, http.StatusBadRequest, codes.InvalidArgument, reason.InvalidArgument},
		{"JSON garbage", "", jsonType, []byte(`{"username": x`), nil, http.StatusBadRequest, codes.InvalidArgument, reason.MalformedBody},
		{"truncated frame", "", web, []byte("\x00\x00\x00\x00\x0a\x01"), nil, http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"frame shorter than the body", "", web, append(grpcWebFrame(0, valid), 0), nil, http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"no frame", "", web, []byte("\x00\x00"), nil, http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"empty", "", web, nil, nil, http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"bad flag", "", web, grpcWebFrame(2, valid), nil, http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"trailer flag", "", web, grpcWebFrame(0x80, valid), nil, http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"compressed without Grpc-Encoding", "", web, grpcWebFrame(1, valid), nil, http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"compressed, not gzip", "", web, grpcWebFrame(1, valid), []string{"Grpc-Encoding", "gzip"}, http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"compressed, zstd", "", web, grpcWebFrame(1, valid), []string{"Grpc-Encoding", "zstd"}, http.StatusOK, codes.InvalidArgument, reason.UnsupportedContentEncoding},
		{"frame of garbage", "", web, grpcWebFrame(0, garbage), nil, http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"gzip frame of garbage", "", web, grpcWebFrame(1, gzipBytes(t, garbage)), []string{"Grpc-Encoding", "gzip"}, http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"type with parameters", "", web + "; x", grpcWebFrame(0, garbage), nil, http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"bad Grpc-Timeout", "", web, grpcWebFrame(0, valid), []string{"Grpc-Timeout", "1x"}, http.StatusOK, codes.InvalidArgument, reason.InvalidArgument},
		{"Grpc-Timeout too long", "", web, grpcWebFrame(0, valid), []string{"Grpc-Timeout", "123456789S"}, http.StatusOK, codes.InvalidArgument, reason.InvalidArgument},
		{"text not base64", "", text, []byte("!!!!"), nil, http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"text of two strings", "", text, append(b64([]byte{0, 0, 0, 0}), b64([]byte{0})...), nil, http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"text truncated frame", "", text, b64([]byte("\x00\x00\x00\x00\x0a\x01")), nil, http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"text frame of garbage", "", text, b64(grpcWebFrame(0, garbage)), nil, http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"unknown method", "", web, grpcWebFrame(0, valid), nil, http.StatusNotFound, codes.NotFound, reason.RouteNotFound},
		{"unknown method, Connect", "", proto, valid, nil, http.StatusNotFound, codes.NotFound, reason.RouteNotFound},
		{"unknown method, GET", http.MethodGet, proto, nil, nil, http.StatusNotFound, codes.NotFound, reason.RouteNotFound},
		{"unknown method, another type", "", "text/plain", valid, nil, http.StatusNotFound, codes.NotFound, reason.RouteNotFound},
		{"GET", http.MethodGet, proto, nil, nil, http.StatusMethodNotAllowed, codes.Unimplemented, reason.MethodNotAllowed},
		{"another type", "", "text/plain", valid, nil, http.StatusUnsupportedMediaType, codes.InvalidArgument, reason.UnsupportedMediaType},
		// A server-streaming method: Connect's streaming types, and
		// gRPC-Web's, with the same guards.
		{"stream, Connect's unary type", "", proto, nil, nil, http.StatusUnsupportedMediaType, codes.InvalidArgument, reason.UnsupportedMediaType},
		{"stream, gRPC-Web bad flag", "", web, grpcWebFrame(2, nil), nil, http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"stream, Connect bad flag", "", connectStream, grpcWebFrame(2, nil), nil, http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"stream, Connect envelope shorter than the body", "", connectStream, append(grpcWebFrame(0, nil), 0), nil, http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"stream, Connect compressed without Connect-Content-Encoding", "", connectStream, grpcWebFrame(1, nil), nil, http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"stream, Connect compressed, zstd", "", connectStream, grpcWebFrame(1, nil), []string{"Connect-Content-Encoding", "zstd"}, http.StatusOK, codes.InvalidArgument, reason.UnsupportedContentEncoding},
		{"stream, Connect too large", "", connectStream, grpcWebFrame(0, make([]byte, browserLimit+1)), nil, http.StatusOK, codes.ResourceExhausted, reason.BodyTooLarge},
		{"Connect's streaming type, unary method", "", "application/connect+proto", valid, nil, http.StatusUnsupportedMediaType, codes.InvalidArgument, reason.UnsupportedMediaType},
	} {
		t.Run(test.name, func(t *testing.T) {
			method, path := test.method, createAccount
			if method == "" {
				method = http.MethodPost
			}
			if strings.HasPrefix(test.name, "unknown method") {
				path = "/sheba.v1.AccountService/Nope"
			}
			if strings.HasPrefix(test.name, "stream") {
				path = shebav1.EventService_StreamEvents_FullMethodName
			}
			r := browserPost(t, url, method, path, test.contentType, test.body, test.header...)
			if r.code != test.httpCode {
				t.Errorf("HTTP %d, want %d; body %q", r.code, test.httpCode, r.body)
			}
			if r.st == nil {
				t.Fatalf("success (%q), want %v %s", r.username, test.code, test.why)
			}
			if r.st.Code() != test.code {
				t.Errorf("got %v %q, want %v", r.st.Code(), r.st.Message(), test.code)
			}
			if diff := cmp.Diff([]string{reason.Domain + "/" + test.why}, resttest.ErrorInfos(r.st)); diff != "" {
				t.Errorf("ErrorInfo (-want +got):\n%s", diff)
			}
			if test.code == codes.ResourceExhausted && r.header.Get("Retry-After") != "1" {
				t.Errorf("Retry-After: got %q, want 1", r.header.Get("Retry-After"))
			}
		})
	}
}

// TestConnectEmptyJSONBody: a Connect JSON call with no body is the
// client's mistake, 400 INVALID_ARGUMENT MALFORMED_BODY with its ErrorInfo,
// on the connect-go path that serves the browser protocols (vanguard, the
// other way, answered 500 INTERNAL).
func TestConnectEmptyJSONBody(t *testing.T) {
	r := browserPost(t, newBrowserGateway(t, true), http.MethodPost, createAccount, "application/json", nil)
	if r.code != http.StatusBadRequest {
		t.Errorf("HTTP %d, want 400; body %q", r.code, r.body)
	}
	if r.st == nil {
		t.Fatalf("success (%q), want INVALID_ARGUMENT MALFORMED_BODY", r.username)
	}
	if r.st.Code() != codes.InvalidArgument {
		t.Errorf("got %v %q, want INVALID_ARGUMENT", r.st.Code(), r.st.Message())
	}
	if diff := cmp.Diff([]string{reason.Domain + "/" + reason.MalformedBody}, resttest.ErrorInfos(r.st)); diff != "" {
		t.Errorf("ErrorInfo (-want +got):\n%s", diff)
	}
}

// TestBrowserBodies: what decodes reaches the server as sent: compressed,
// in text form with line breaks, without a length; and a call without a
// key is served with an empty message, its body unread.
func TestBrowserBodies(t *testing.T) { bothWays(t, testBrowserBodies) }

func testBrowserBodies(t *testing.T, url string) {
	valid := createBody(t, 3)
	wrapped := base64.StdEncoding.EncodeToString(grpcWebFrame(0, valid))
	wrapped = wrapped[:4] + "\r\n" + wrapped[4:8] + "\n" + wrapped[8:]
	for _, test := range []struct {
		name        string
		contentType string
		body        []byte
		header      []string
		want        string
	}{
		{"Connect proto", "application/proto", valid, nil, "uuu"},
		{"Connect proto, gzip", "application/proto", gzipBytes(t, valid), []string{"Content-Encoding", "gzip"}, "uuu"},
		{"Connect JSON, gzip", "application/json", gzipBytes(t, []byte(`{"username":"uuu"}`)), []string{"Content-Encoding", "gzip"}, "uuu"},
		{"Connect JSON, chunked", "application/json", []byte(`{"username":"uuu"}`), []string{"chunked", ""}, "uuu"},
		{"gRPC-Web", "application/grpc-web", grpcWebFrame(0, valid), nil, "uuu"},
		{"gRPC-Web, gzip", "application/grpc-web", grpcWebFrame(1, gzipBytes(t, valid)), []string{"Grpc-Encoding", "gzip"}, "uuu"},
		{"gRPC-Web, gzip named, not compressed", "application/grpc-web", grpcWebFrame(0, valid), []string{"Grpc-Encoding", "gzip"}, "uuu"},
		{"gRPC-Web text, line breaks", "application/grpc-web-text", []byte(wrapped), nil, "uuu"},
		{"gRPC-Web text, chunked", "application/grpc-web-text", []byte(wrapped), []string{"chunked", ""}, "uuu"},
		// A timeout of more digits than Connect's ten is as good as none.
		{"Connect proto, a timeout of 11 digits", "application/proto", valid, []string{"Connect-Timeout-Ms", "12345678901"}, "uuu"},
		{"Connect proto, a timeout with leading zeros", "application/proto", valid, []string{"Connect-Timeout-Ms", "000000060000"}, "uuu"},
		{"no key", "application/proto", []byte("\xff\xff\xff"), []string{"X-Api-Key", "wrong"}, ""},
		{"no key, gRPC-Web", "application/grpc-web", []byte("\xff"), []string{"X-Api-Key", "wrong", "Grpc-Encoding", "zstd"}, ""},
	} {
		t.Run(test.name, func(t *testing.T) {
			r := browserPost(t, url, http.MethodPost, createAccount, test.contentType, test.body, test.header...)
			if r.code != http.StatusOK || r.st != nil {
				t.Fatalf("HTTP %d, %v; body %q", r.code, r.st, r.body)
			}
			if r.username != test.want {
				t.Errorf("username %q, want %q", r.username, test.want)
			}
		})
	}
}

// TestBrowserLimit: a message of http.max_body_bytes passes in every form
// (gRPC-Web text judged on its exact decoded length, not base64's
// estimate), one byte more is RESOURCE_EXHAUSTED BODY_TOO_LARGE, whether
// the body declares its length or not.
func TestBrowserLimit(t *testing.T) { bothWays(t, testBrowserLimit) }

func testBrowserLimit(t *testing.T, url string) {
	atLimit, over := createBody(t, browserLimit-2), createBody(t, browserLimit-1)
	if len(atLimit) != browserLimit {
		t.Fatalf("the message at the limit is %d bytes", len(atLimit))
	}
	forms := map[string]struct {
		contentType string
		body        func([]byte) []byte
	}{
		"Connect proto": {"application/proto", func(m []byte) []byte { return m }},
		"gRPC-Web":      {"application/grpc-web", func(m []byte) []byte { return grpcWebFrame(0, m) }},
		"gRPC-Web text": {"application/grpc-web-text", func(m []byte) []byte {
			return []byte(base64.StdEncoding.EncodeToString(grpcWebFrame(0, m)))
		}},
	}
	for name, f := range forms {
		for _, sent := range [][]string{nil, {"chunked", ""}} {
			t.Run(name+strings.Join(sent, " "), func(t *testing.T) {
				r := browserPost(t, url, http.MethodPost, createAccount, f.contentType, f.body(atLimit), sent...)
				if r.st != nil || r.username != string(atLimit[2:]) {
					t.Errorf("at the limit: HTTP %d, %v, username %q", r.code, r.st, r.username)
				}
				r = browserPost(t, url, http.MethodPost, createAccount, f.contentType, f.body(over), sent...)
				if r.st == nil || r.st.Code() != codes.ResourceExhausted {
					t.Fatalf("one byte over: HTTP %d, %v", r.code, r.st)
				}
				if diff := cmp.Diff([]string{reason.Domain + "/" + reason.BodyTooLarge}, resttest.ErrorInfos(r.st)); diff != "" {
					t.Errorf("ErrorInfo (-want +got):\n%s", diff)
				}
			})
		}
	}
}
