package e2e

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/e2e/resttest"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// The browser protocols (docs/browser.md): each test runs on every one of
// them, with connect-go's own clients (built from the generated messages,
// no generated client needed) and, for gRPC-Web's text form, which
// connect-go does not speak, raw HTTP requests.
var browserProtocols = []string{"connect-json", "connect-proto", "grpc-web", "grpc-web-text"}

// browserAnswer is what a browser-protocol client sees of a call.
type browserAnswer[Res any] struct {
	resp *Res
	// st is the call's error (nil on success), with its details.
	st *status.Status
	// header holds the answer's headers (and, on an error, its trailers).
	header http.Header
}

// browserCall calls method with req over protocol p (one of
// browserProtocols; but gRPC-Web's text form with "+gzip" for a compressed
// request), with key in x-api-key unless it is "". header holds more name,
// value pairs to send.
func browserCall[Req, Res any, PReq interface {
	*Req
	proto.Message
}, PRes interface {
	*Res
	proto.Message
}](t *testing.T, e *testEnv, p, method string, req PReq, key string, header ...string) browserAnswer[Res] {
	t.Helper()
	h := http.Header{}
	if key != "" {
		h.Set("X-Api-Key", key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		h.Set(header[i], header[i+1])
	}
	if p == "grpc-web-text" {
		resp := PRes(new(Res))
		st, hdr := grpcWebTextCall(t, e.baseURL+method, h, req, resp)
		if st != nil {
			return browserAnswer[Res]{st: st, header: hdr}
		}
		return browserAnswer[Res]{resp: (*Res)(resp), header: hdr}
	}
	var opts []connect.ClientOption
	if base, ok := strings.CutSuffix(p, "+gzip"); ok {
		p, opts = base, append(opts, connect.WithSendGzip())
	}
	switch p {
	case "connect-json":
		opts = append(opts, connect.WithProtoJSON())
	case "grpc-web":
		opts = append(opts, connect.WithGRPCWeb())
	}
	client := connect.NewClient[Req, Res](http.DefaultClient, e.baseURL+method, opts...)
	r := connect.NewRequest((*Req)(req))
	for k, v := range h {
		r.Header()[k] = v
	}
	resp, err := client.CallUnary(t.Context(), r)
	if err != nil {
		var ce *connect.Error
		if !errors.As(err, &ce) {
			t.Fatalf("%s %s: %v", p, method, err)
		}
		return browserAnswer[Res]{st: statusOfConnect(t, ce), header: ce.Meta()}
	}
	return browserAnswer[Res]{resp: resp.Msg, header: resp.Header()}
}

// statusOfConnect is a connect-go error as a gRPC status, details included.
func statusOfConnect(t *testing.T, ce *connect.Error) *status.Status {
	t.Helper()
	p := &spb.Status{Code: int32(ce.Code()), Message: ce.Message()}
	for _, d := range ce.Details() {
		v, err := d.Value()
		if err != nil {
			t.Fatalf("error detail %s: %v", d.Type(), err)
		}
		a, err := anypb.New(v)
		if err != nil {
			t.Fatal(err)
		}
		p.Details = append(p.Details, a)
	}
	return status.FromProto(p)
}

// grpcWebTextCall makes a unary gRPC-Web call in its text form (base64 of
// the binary frames, both ways), as the grpc-web JavaScript client does by
// default, and returns its status (nil for OK) and the answer's headers.
func grpcWebTextCall(t *testing.T, url string, h http.Header, req, resp proto.Message) (*status.Status, http.Header) {
	t.Helper()
	msg, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	frame := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	body := base64.StdEncoding.EncodeToString(append(frame, msg...))
	hr, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header = h.Clone()
	hr.Header.Set("Content-Type", "application/grpc-web-text")
	hr.Header.Set("X-Grpc-Web", "1")
	r, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer r.Body.Close()
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	if r.StatusCode != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc-web-text") {
		t.Fatalf("POST %s: HTTP %d, Content-Type %q: %s", url, r.StatusCode, r.Header.Get("Content-Type"), raw)
	}
	trailers, messages := grpcWebFrames(t, r.Header, decodeBase64Chunks(t, raw))
	for _, m := range messages {
		if err := proto.Unmarshal(m, resp); err != nil {
			t.Fatalf("message: %v", err)
		}
	}
	return resttest.GRPCWebStatus(t, trailers), trailers
}

// grpcWebFrames splits the body of a binary gRPC-Web answer into its
// messages and its trailers: the status is in the headers h of an answer
// with no message (trailers-only), else in the trailer frame after the
// message, so the trailers are h with those of the trailer frame, if any.
func grpcWebFrames(t *testing.T, h http.Header, body []byte) (trailers http.Header, messages [][]byte) {
	t.Helper()
	trailers = h.Clone()
	for len(body) >= 5 {
		flag, n := body[0], binary.BigEndian.Uint32(body[1:5])
		if int64(n) > int64(len(body)-5) {
			t.Fatalf("gRPC-Web frame of %d bytes in %d", n, len(body)-5)
		}
		payload := body[5 : 5+n]
		body = body[5+n:]
		if flag&0x80 == 0 {
			messages = append(messages, payload)
			continue
		}
		// A header block, which ends with an empty line.
		tp := textproto.NewReader(bufio.NewReader(io.MultiReader(bytes.NewReader(payload), strings.NewReader("\r\n"))))
		mh, err := tp.ReadMIMEHeader()
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("trailer frame %q: %v", payload, err)
		}
		for k, v := range mh {
			trailers[k] = v
		}
	}
	return trailers, messages
}

// decodeBase64Chunks decodes gRPC-Web text, which may be several base64
// strings one after the other, each padded.
func decodeBase64Chunks(t *testing.T, b []byte) []byte {
	t.Helper()
	var out []byte
	for len(b) > 0 {
		end := bytes.IndexByte(b, '=')
		if end < 0 {
			end = len(b)
		}
		for end < len(b) && b[end] == '=' {
			end++
		}
		d, err := base64.StdEncoding.DecodeString(string(b[:end]))
		if err != nil {
			t.Fatalf("base64 %q: %v", b[:end], err)
		}
		out, b = append(out, d...), b[end:]
	}
	return out
}

// wantBrowserError checks a browser-protocol error: its code, the reason of
// its one ErrorInfo and, if field is not empty, a BadRequest violation of
// that field.
func wantBrowserError[Res any](t *testing.T, a browserAnswer[Res], code codes.Code, why, field string) {
	t.Helper()
	if a.st == nil {
		t.Fatalf("got success %v, want %v %s", a.resp, code, why)
	}
	wantStatus(t, a.st, code, why, field)
}

// wantStatus checks an error status of any transport: its code, the reason
// of its one ErrorInfo and, if field is not empty, a BadRequest violation of
// that field.
func wantStatus(t *testing.T, st *status.Status, code codes.Code, why, field string) {
	t.Helper()
	if st.Code() != code {
		t.Fatalf("got %v %q, want code %v", st.Code(), st.Message(), code)
	}
	if diff := cmp.Diff([]string{reason.Domain + "/" + why}, resttest.ErrorInfos(st)); diff != "" {
		t.Errorf("ErrorInfo (-want +got):\n%s", diff)
	}
	if field != "" && !hasViolation(st, field) {
		t.Errorf("no field violation for %q in %v", field, st.Details())
	}
}

// TestBrowserProtocols makes the same calls on every browser protocol:
// they answer as gRPC does, with its codes and ErrorInfo in the protocol's
// own format, and each is counted once under its gRPC method.
func TestBrowserProtocols(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	const (
		ping   = "/sheba.v1.PingService/Ping"
		get    = "/sheba.v1.AccountService/GetAccount"
		create = "/sheba.v1.AccountService/CreateAccount"
	)
	for _, p := range browserProtocols {
		t.Run(p, func(t *testing.T) {
			a := browserCall[shebav1.PingRequest, shebav1.PingResponse](t, e, p, ping, &shebav1.PingRequest{}, testKey)
			if a.st != nil || a.resp.GetMessage() != "pong" {
				t.Fatalf("Ping: got %v, %v; want pong", a.resp, a.st)
			}
			if a.header.Get("X-Request-Id") == "" {
				t.Errorf("Ping: no X-Request-Id in %v", a.header)
			}
			// Without a key, with a body that is not even read.
			wantBrowserError(t, browserCall[shebav1.GetAccountRequest, shebav1.GetAccountResponse](t, e, p, get,
				&shebav1.GetAccountRequest{AccountId: unknownID}, ""), codes.Unauthenticated, reason.APIKeyMissing, "")
			wantBrowserError(t, browserCall[shebav1.GetAccountRequest, shebav1.GetAccountResponse](t, e, p, get,
				&shebav1.GetAccountRequest{AccountId: unknownID}, "wrong-key"), codes.Unauthenticated, reason.APIKeyInvalid, "")
			wantBrowserError(t, browserCall[shebav1.GetAccountRequest, shebav1.GetAccountResponse](t, e, p, get,
				&shebav1.GetAccountRequest{AccountId: unknownID}, testKey), codes.NotFound, reason.NotFound, "")
			wantBrowserError(t, browserCall[shebav1.CreateAccountRequest, shebav1.CreateAccountResponse](t, e, p, create,
				&shebav1.CreateAccountRequest{Username: "NOT VALID!", Password: "password1"}, testKey), codes.InvalidArgument, reason.InvalidArgument, "username")
			// A bearer key works as on REST and gRPC.
			created := browserCall[shebav1.CreateAccountRequest, shebav1.CreateAccountResponse](t, e, p, create,
				&shebav1.CreateAccountRequest{Username: "user-" + strings.ReplaceAll(p, "-", "."), Password: "password1"}, "",
				"Authorization", "Bearer "+testKey)
			if created.st != nil || created.resp.GetAccount().GetId() == "" {
				t.Fatalf("CreateAccount with a bearer key: got %v, %v", created.resp, created.st)
			}
		})
	}

	// Each call above counted once, under its gRPC method, whatever the
	// protocol: none went through the REST gateway nor twice through the
	// chain.
	n := float64(len(browserProtocols))
	f := e.scrape(t)
	const acct = "/sheba.v1.AccountService/"
	wantRequests := map[string]float64{
		"method=" + ping + ",code=OK,api_key_id=test":                           n,
		"method=" + acct + "GetAccount,code=Unauthenticated,api_key_id=none":    2 * n,
		"method=" + acct + "GetAccount,code=NotFound,api_key_id=test":           n,
		"method=" + acct + "CreateAccount,code=InvalidArgument,api_key_id=test": n,
		"method=" + acct + "CreateAccount,code=OK,api_key_id=test":              n,
	}
	if diff := cmp.Diff(wantRequests, series(f, "sheba_requests_total", "method", "code", "api_key_id")); diff != "" {
		t.Errorf("sheba_requests_total (-want +got):\n%s", diff)
	}
	handled := series(f, "grpc_server_handled_total", "grpc_service", "grpc_method", "grpc_code")
	for k, want := range map[string]float64{
		"grpc_service=sheba.v1.PingService,grpc_method=Ping,grpc_code=OK":                          n,
		"grpc_service=sheba.v1.AccountService,grpc_method=GetAccount,grpc_code=Unauthenticated":    2 * n,
		"grpc_service=sheba.v1.AccountService,grpc_method=CreateAccount,grpc_code=InvalidArgument": n,
	} {
		if got := handled[k]; got != want {
			t.Errorf("grpc_server_handled_total{%s}: got %v, want %v", k, got, want)
		}
	}
	if got := series(f, "sheba_rejected_total", "reason")["reason=unauthenticated"]; got != 2*n {
		t.Errorf("sheba_rejected_total{reason=unauthenticated}: got %v, want %v", got, 2*n)
	}
	// The log line names the protocol.
	for _, want := range []string{`"transport":"connect"`, `"transport":"grpc-web"`} {
		if !strings.Contains(e.logs.String(), want) {
			t.Errorf("no request log line with %s", want)
		}
	}
}

// TestBrowserGzip: compressed requests (Connect's Content-Encoding,
// gRPC-Web's compressed frames) are decompressed and served.
func TestBrowserGzip(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	for _, p := range []string{"connect-json+gzip", "connect-proto+gzip", "grpc-web+gzip"} {
		t.Run(p, func(t *testing.T) {
			a := browserCall[shebav1.CreateAccountRequest, shebav1.CreateAccountResponse](t, e, p, "/sheba.v1.AccountService/CreateAccount",
				&shebav1.CreateAccountRequest{Username: "gz-" + strings.NewReplacer("+", ".", "-", ".").Replace(p), Password: "password1"}, testKey)
			if a.st != nil || a.resp.GetAccount().GetId() == "" {
				t.Fatalf("CreateAccount: got %v, %v", a.resp, a.st)
			}
		})
	}
}

// TestBrowserRateLimit: a caller over its per-key rate gets
// RESOURCE_EXHAUSTED KEY_RATE_LIMITED with Retry-After, and the limit's
// state, on every browser protocol.
func TestBrowserRateLimit(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, func(c *config.Config) {
		c.Limits.PerKeyRate, c.Limits.PerKeyBurst = 0.001, 1 // one call, then key_rate
	})
	const ping = "/sheba.v1.PingService/Ping"
	if a := browserCall[shebav1.PingRequest, shebav1.PingResponse](t, e, "connect-proto", ping, &shebav1.PingRequest{}, testKey); a.st != nil {
		t.Fatalf("first Ping: %v", a.st)
	}
	for _, p := range browserProtocols {
		t.Run(p, func(t *testing.T) {
			a := browserCall[shebav1.PingRequest, shebav1.PingResponse](t, e, p, ping, &shebav1.PingRequest{}, testKey)
			wantBrowserError(t, a, codes.ResourceExhausted, reason.KeyRateLimited, "")
			if s, err := strconv.Atoi(a.header.Get("Retry-After")); err != nil || s < 1 {
				t.Errorf("Retry-After: got %q, want whole seconds, at least 1", a.header.Get("Retry-After"))
			}
			if a.header.Get("RateLimit") == "" || a.header.Get("RateLimit-Policy") == "" {
				t.Errorf("no RateLimit and RateLimit-Policy in %v", a.header)
			}
		})
	}
	handled := series(e.scrape(t), "grpc_server_handled_total", "grpc_service", "grpc_method", "grpc_code")
	if got, want := handled["grpc_service=sheba.v1.PingService,grpc_method=Ping,grpc_code=ResourceExhausted"], float64(len(browserProtocols)); got != want {
		t.Errorf("grpc_server_handled_total{Ping, ResourceExhausted}: got %v, want %v", got, want)
	}
}

// TestBrowserHook: the external hook is asked about a Connect call, as
// about any gRPC call.
func TestBrowserHook(t *testing.T) {
	t.Parallel()
	h := startHookServer(t, "tcp")
	e := newTestEnv(t, withHook(h.url))
	a := browserCall[shebav1.GetAccountRequest, shebav1.GetAccountResponse](t, e, "connect-json", "/sheba.v1.AccountService/GetAccount",
		&shebav1.GetAccountRequest{AccountId: unknownID}, testKey)
	wantBrowserError(t, a, codes.NotFound, reason.NotFound, "")
	got, _ := h.calls()
	if len(got) != 1 {
		t.Fatalf("the hook was asked %d times, want once: %v", len(got), got)
	}
	want := map[string]any{
		"method":    "/sheba.v1.AccountService/GetAccount",
		"transport": "grpc",
		"caller":    map[string]any{"apiKeyId": testKeyID},
		"body":      map[string]any{"accountId": unknownID},
	}
	for k, v := range want {
		if diff := cmp.Diff(v, got[0][k]); diff != "" {
			t.Errorf("hook call's %s (-want +got):\n%s", k, diff)
		}
	}
}

// TestBrowserGuards: what the HTTP side answers before the chain, in the
// protocol's format and with exactly one ErrorInfo: a body over
// http.max_body_bytes, a gzip body that grows past it, a body that does not
// decode (JSON, protobuf, a gRPC-Web frame, base64), and, in REST's format,
// a path the API has not, another HTTP method or content type.
func TestBrowserGuards(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, func(c *config.Config) { c.HTTP.MaxBodyBytes = 1024 })
	const create = "/sheba.v1.AccountService/CreateAccount"
	big := &shebav1.CreateAccountRequest{Username: "someone", Password: strings.Repeat("p", 2000)}
	for _, p := range browserProtocols {
		t.Run(p, func(t *testing.T) {
			tooLarge := browserCall[shebav1.CreateAccountRequest, shebav1.CreateAccountResponse](t, e, p, create, big, testKey)
			wantBrowserError(t, tooLarge, codes.ResourceExhausted, reason.BodyTooLarge, "")
			if got := tooLarge.header.Get("Retry-After"); got != "1" {
				t.Errorf("Retry-After: got %q, want 1 (every RESOURCE_EXHAUSTED says when to retry)", got)
			}
		})
	}
	// A client of the protocols reads the 404 of an unknown method as
	// unimplemented.
	for _, p := range []string{"connect-proto", "grpc-web"} {
		a := browserCall[shebav1.PingRequest, shebav1.PingResponse](t, e, p, "/sheba.v1.PingService/Nope", &shebav1.PingRequest{}, testKey)
		if a.st == nil || a.st.Code() != codes.Unimplemented {
			t.Errorf("%s: an unknown method: got %v, want unimplemented", p, a.st)
		}
	}
	// post sends body to path with encoding as its Content-Encoding (or,
	// for gRPC-Web, Grpc-Encoding), or, for "chunked", with no length.
	post := func(t *testing.T, method, path, contentType, encoding string, body []byte) restResponse {
		t.Helper()
		var r io.Reader = bytes.NewReader(body)
		if encoding == "chunked" {
			r = io.MultiReader(r) // not a type whose length net/http knows
		}
		req, err := http.NewRequestWithContext(t.Context(), method, e.baseURL+path, r)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Api-Key", testKey)
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Connect-Protocol-Version", "1")
		if encoding != "" && encoding != "chunked" {
			req.Header.Set("Content-Encoding", encoding)
			req.Header.Set("Grpc-Encoding", encoding)
		}
		return resttest.Client{}.Send(t, req)
	}
	// A gzip bomb: 1 KiB at most as sent, far more once decompressed.
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	_, _ = zw.Write(append([]byte(`{"username":"someone","password":"`), bytes.Repeat([]byte("p"), 1<<19)...))
	_ = zw.Close()
	if bomb.Len() > 1024 {
		t.Fatalf("the bomb is %d bytes compressed", bomb.Len())
	}
	frame := func(flag byte, msg []byte) []byte {
		return append(binary.BigEndian.AppendUint32([]byte{flag}, uint32(len(msg))), msg...)
	}
	ping, err := proto.Marshal(&shebav1.CreateAccountRequest{Username: "someone"})
	if err != nil {
		t.Fatal(err)
	}
	const (
		jsonType, protoType = "application/json", "application/proto"
		web, text           = "application/grpc-web", "application/grpc-web-text"
		unknown             = "/sheba.v1.AccountService/Nope"
	)
	for _, test := range []struct {
		name                string
		method, path        string
		contentType, encode string
		body                []byte
		httpCode            int
		code                codes.Code
		why                 string
	}{
		{"gzip past the limit", http.MethodPost, create, jsonType, "gzip", bomb.Bytes(), http.StatusTooManyRequests, codes.ResourceExhausted, reason.BodyTooLarge},
		{"JSON garbage", http.MethodPost, create, jsonType, "", []byte(`{"username": x`), http.StatusBadRequest, codes.InvalidArgument, reason.MalformedBody},
		{"unknown field", http.MethodPost, create, jsonType, "", []byte(`{"extra":1}`), http.StatusBadRequest, codes.InvalidArgument, reason.MalformedBody},
		{"chunked past the limit", http.MethodPost, create, jsonType, "chunked", []byte(`{"username":"` + strings.Repeat("u", 2000) + `"}`), http.StatusTooManyRequests, codes.ResourceExhausted, reason.BodyTooLarge},
		{"not gzip", http.MethodPost, create, jsonType, "gzip", []byte(`{}`), http.StatusBadRequest, codes.InvalidArgument, reason.MalformedBody},
		{"proto garbage", http.MethodPost, create, protoType, "", []byte("\xff\xff\xff"), http.StatusBadRequest, codes.InvalidArgument, reason.MalformedBody},
		{"truncated frame", http.MethodPost, create, web, "", []byte("\x00\x00\x00\x00\x0a\x01"), http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"bad flag", http.MethodPost, create, web, "", frame(2, ping), http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"length mismatch", http.MethodPost, create, web, "", append(frame(0, ping), 0), http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"compressed without Grpc-Encoding", http.MethodPost, create, web, "", frame(1, ping), http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"frame of garbage", http.MethodPost, create, web, "", frame(0, []byte("\xff\xff\xff")), http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"not base64", http.MethodPost, create, text, "", []byte("!!!!"), http.StatusOK, codes.InvalidArgument, reason.MalformedBody},
		{"unknown method, Connect", http.MethodPost, unknown, jsonType, "", []byte(`{}`), http.StatusNotFound, codes.NotFound, reason.RouteNotFound},
		{"unknown method, gRPC-Web", http.MethodPost, unknown, web, "", frame(0, nil), http.StatusNotFound, codes.NotFound, reason.RouteNotFound},
		{"unknown method, GET", http.MethodGet, unknown, jsonType, "", nil, http.StatusNotFound, codes.NotFound, reason.RouteNotFound},
		{"unknown method, another type", http.MethodPost, unknown, "text/plain", "", []byte("x"), http.StatusNotFound, codes.NotFound, reason.RouteNotFound},
		{"GET", http.MethodGet, create, jsonType, "", nil, http.StatusMethodNotAllowed, codes.Unimplemented, reason.MethodNotAllowed},
		{"gRPC", http.MethodPost, create, "application/grpc", "", []byte("x"), http.StatusUnsupportedMediaType, codes.InvalidArgument, reason.UnsupportedMediaType},
	} {
		t.Run(test.name, func(t *testing.T) {
			r := post(t, test.method, test.path, test.contentType, test.encode, test.body)
			wantCode(t, r, test.httpCode)
			var st *status.Status
			switch ct := r.Header.Get("Content-Type"); {
			case strings.HasPrefix(ct, "application/grpc-web"):
				// Trailers-only: the status is in the headers.
				st = resttest.GRPCWebStatus(t, r.Header)
			case bytes.HasPrefix(r.Body, []byte(`{"code":"`)):
				st = resttest.ConnectStatus(t, r.Body)
			default:
				// Not a browser protocol's request: REST's error body.
				st = status.FromProto(wantRESTError(t, r, test.httpCode, test.code, ""))
			}
			if st == nil || st.Code() != test.code {
				t.Fatalf("got %v, want code %v; body %s", st, test.code, r.Body)
			}
			if diff := cmp.Diff([]string{reason.Domain + "/" + test.why}, resttest.ErrorInfos(st)); diff != "" {
				t.Errorf("ErrorInfo (-want +got):\n%s; body %s", diff, r.Body)
			}
			if r.Code == http.StatusTooManyRequests && r.Header.Get("Retry-After") != "1" {
				t.Errorf("a 429 without Retry-After: 1: %v", r.Header)
			}
		})
	}
}

// TestBrowserContentTypes: a Connect JSON body's type with parameters or in
// capitals is still Connect JSON.
func TestBrowserContentTypes(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	for _, ct := range []string{"application/json; charset=utf-8", "Application/JSON"} {
		r := e.do(t, http.MethodPost, "/sheba.v1.PingService/Ping", "{}", "Content-Type", ct)
		wantCode(t, r, http.StatusOK)
		if got := string(r.Body); got != `{"message":"pong"}` {
			t.Errorf("%s: got %s, want the pong", ct, got)
		}
	}
}

// TestBrowserCORS: with allowed origins, a preflight is answered without a
// key and an allowed origin's requests (REST and browser protocols) are
// granted with the headers a client reads; another origin gets no grant.
// By default no CORS header is ever written.
func TestBrowserCORS(t *testing.T) {
	t.Parallel()
	const allowed, refused = "http://app.example.test", "http://evil.example.test"
	on := newTestEnv(t, func(c *config.Config) { c.HTTP.CORS.AllowedOrigins = []string{allowed} })
	off := newTestEnv(t)
	preflight := func(t *testing.T, e *testEnv, origin, path string) restResponse {
		t.Helper()
		return e.do(t, http.MethodOptions, path, "", "X-Api-Key", "", "Origin", origin,
			"Access-Control-Request-Method", "POST",
			"Access-Control-Request-Headers", "connect-protocol-version,content-type,x-api-key,x-grpc-web,x-user-agent")
	}
	connectPost := func(t *testing.T, e *testEnv, origin string) restResponse {
		t.Helper()
		return e.do(t, http.MethodPost, "/sheba.v1.AccountService/GetAccount", `{"accountId":"`+unknownID+`"}`,
			"Origin", origin, "Connect-Protocol-Version", "1")
	}

	t.Run("preflight allowed", func(t *testing.T) {
		r := preflight(t, on, allowed, "/sheba.v1.AccountService/GetAccount")
		wantCode(t, r, http.StatusNoContent)
		for k, want := range map[string]string{
			"Access-Control-Allow-Origin":  allowed,
			"Access-Control-Allow-Methods": "POST",
			"Access-Control-Allow-Headers": "connect-protocol-version,content-type,x-api-key,x-grpc-web,x-user-agent",
			"Access-Control-Max-Age":       "7200",
		} {
			if got := r.Header.Get(k); got != want {
				t.Errorf("%s: got %q, want %q", k, got, want)
			}
		}
	})
	t.Run("preflight of a conditional change", func(t *testing.T) {
		// A page that cancels under If-Match (docs/api.md#etags).
		r := on.do(t, http.MethodOptions, "/v1/accounts/"+unknownID+"/subscription:cancel", "", "X-Api-Key", "", "Origin", allowed,
			"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "content-type,if-match,x-api-key")
		wantCode(t, r, http.StatusNoContent)
		if got := r.Header.Get("Access-Control-Allow-Headers"); got != "content-type,if-match,x-api-key" {
			t.Errorf("Access-Control-Allow-Headers: got %q, want content-type,if-match,x-api-key", got)
		}
	})
	t.Run("preflight refused", func(t *testing.T) {
		r := preflight(t, on, refused, "/v1/ping")
		wantNoGrant(t, r)
	})
	t.Run("request allowed", func(t *testing.T) {
		r := connectPost(t, on, allowed)
		wantCode(t, r, http.StatusNotFound)
		if got := r.Header.Get("Access-Control-Allow-Origin"); got != allowed {
			t.Errorf("Access-Control-Allow-Origin: got %q, want %q", got, allowed)
		}
		exposed := map[string]bool{}
		for _, h := range strings.Split(r.Header.Get("Access-Control-Expose-Headers"), ",") {
			exposed[http.CanonicalHeaderKey(strings.TrimSpace(h))] = true
		}
		for _, h := range []string{"Grpc-Status", "Grpc-Message", "Grpc-Status-Details-Bin", "Connect-Content-Encoding",
			"Ratelimit", "Ratelimit-Policy", "Retry-After", "X-Request-Id", "Idempotent-Replayed", "Etag"} {
			if !exposed[h] {
				t.Errorf("%s not in Access-Control-Expose-Headers %q", h, r.Header.Get("Access-Control-Expose-Headers"))
			}
		}
		rest := on.do(t, http.MethodGet, "/v1/ping", "", "Origin", allowed)
		wantCode(t, rest, http.StatusOK)
		if got := rest.Header.Get("Access-Control-Allow-Origin"); got != allowed {
			t.Errorf("REST: Access-Control-Allow-Origin: got %q, want %q", got, allowed)
		}
	})
	t.Run("request refused", func(t *testing.T) {
		r := connectPost(t, on, refused)
		wantCode(t, r, http.StatusNotFound)
		wantNoGrant(t, r)
	})
	t.Run("not the API", func(t *testing.T) {
		// The OpenAPI document, its page and the operator endpoints are not
		// granted CORS (docs/browser.md#cors), a preflight for them
		// neither.
		for _, path := range []string{"/openapi.json", "/docs", "/livez"} {
			wantNoGrant(t, preflight(t, on, allowed, path))
			r := on.do(t, http.MethodGet, path, "", "Origin", allowed)
			wantNoGrant(t, r)
		}
	})
	t.Run("preflights not counted", func(t *testing.T) {
		// The calls above, and none of the preflights.
		want := map[string]float64{
			"method=/sheba.v1.AccountService/GetAccount,code=NotFound": 2,
			"method=/sheba.v1.PingService/Ping,code=OK":                1,
		}
		if diff := cmp.Diff(want, series(on.scrape(t), "sheba_requests_total", "method", "code")); diff != "" {
			t.Errorf("sheba_requests_total (-want +got):\n%s", diff)
		}
	})
	t.Run("default", func(t *testing.T) {
		for _, r := range []restResponse{preflight(t, off, allowed, "/sheba.v1.AccountService/GetAccount"), connectPost(t, off, allowed),
			off.do(t, http.MethodGet, "/v1/ping", "", "Origin", allowed)} {
			for k := range r.Header {
				if strings.HasPrefix(k, "Access-Control-") {
					t.Errorf("%s: %q with no allowed origins", k, r.Header.Get(k))
				}
			}
		}
	})
}

// wantNoGrant checks that an answer grants no CORS access.
func wantNoGrant(t *testing.T, r restResponse) {
	t.Helper()
	for _, k := range []string{"Access-Control-Allow-Origin", "Access-Control-Allow-Methods", "Access-Control-Allow-Headers", "Access-Control-Expose-Headers"} {
		if v := r.Header.Get(k); v != "" {
			t.Errorf("%s: %q for a refused origin", k, v)
		}
	}
}

// TestBrowserUnaryAnswerWhole: a unary answer of every browser protocol
// comes whole, with its Content-Length, over HTTP/1.1: connect-go flushes a
// gRPC-Web answer after its message and after its trailers, which made it
// chunked and three writes to the socket where one does.
func TestBrowserUnaryAnswerWhole(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	for _, c := range []struct{ contentType, body string }{
		{"application/proto", ""},
		{"application/json", "{}"},
		{"application/grpc-web+proto", "\x00\x00\x00\x00\x00"},
		{"application/grpc-web-text", base64.StdEncoding.EncodeToString([]byte("\x00\x00\x00\x00\x00"))},
	} {
		t.Run(c.contentType, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.baseURL+"/sheba.v1.PingService/Ping", strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", c.contentType)
			req.Header.Set("X-Api-Key", testKey)
			r, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Body.Close()
			raw, err := io.ReadAll(r.Body)
			if err != nil {
				t.Fatal(err)
			}
			if r.StatusCode != http.StatusOK || r.ProtoMajor != 1 {
				t.Fatalf("HTTP/%d.%d %d: %q", r.ProtoMajor, r.ProtoMinor, r.StatusCode, raw)
			}
			if r.ContentLength != int64(len(raw)) || len(r.TransferEncoding) != 0 {
				t.Errorf("Content-Length %d, Transfer-Encoding %q for a body of %d bytes; want the body's length, not chunked",
					r.ContentLength, r.TransferEncoding, len(raw))
			}
			if strings.HasPrefix(c.contentType, "application/grpc-web") {
				if strings.HasSuffix(c.contentType, "-text") {
					raw = decodeBase64Chunks(t, raw)
				}
				trailers, messages := grpcWebFrames(t, r.Header, raw)
				var pong shebav1.PingResponse
				if len(messages) != 1 || proto.Unmarshal(messages[0], &pong) != nil || pong.GetMessage() != "pong" || trailers.Get("Grpc-Status") != "0" {
					t.Errorf("gRPC-Web answer: messages %q, trailers %v; want pong and grpc-status 0", messages, trailers)
				}
			}
		})
	}
}
