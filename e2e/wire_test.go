package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// Wire formats (docs/api.md): compression on both transports and CBOR on
// REST.

func gzipBytes(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func zstdBytes(t *testing.T, b []byte) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}

// decompress decodes a response body by its Content-Encoding.
func decompress(t *testing.T, coding string, b []byte) []byte {
	t.Helper()
	var r io.Reader
	switch coding {
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("gzip body: %v", err)
		}
		r = zr
	case "zstd":
		zd, err := zstd.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("zstd body: %v", err)
		}
		defer zd.Close()
		r = zd
	default:
		t.Fatalf("unknown coding %q", coding)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("decompress %s body: %v", coding, err)
	}
	return out
}

// jsonValue decodes a JSON document of any shape.
func jsonValue(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("body %q is not JSON: %v", b, err)
	}
	return v
}

// TestRESTCompression: large answers come back in gzip or zstd as asked,
// small ones and the operator endpoints' do not; compressed request bodies
// are read, and broken ones refused without a 500.
func TestRESTCompression(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	waitReady(t, e)
	e.seedSubscriptions(t, 20)

	// Accept-Encoding set by hand turns off the transport's own gzip.
	plain := e.do(t, http.MethodGet, "/v1/subscriptions", "", "Accept-Encoding", "identity")
	wantCode(t, plain, http.StatusOK)
	if ce := plain.header.Get("Content-Encoding"); ce != "" {
		t.Fatalf("identity asked, got Content-Encoding %q", ce)
	}
	if len(plain.body) < 1024 {
		t.Fatalf("list answer is %d bytes, want at least compression.min_bytes (1024)", len(plain.body))
	}
	want := jsonValue(t, plain.body)

	t.Run("responses", func(t *testing.T) {
		for _, test := range []struct {
			accept, want string
		}{
			{"gzip", "gzip"},
			{"zstd", "zstd"},
			{"gzip;q=0.5, zstd;q=0.1", "gzip"},
			{"zstd;q=1, gzip;q=0.2", "zstd"},
		} {
			r := e.do(t, http.MethodGet, "/v1/subscriptions", "", "Accept-Encoding", test.accept)
			wantCode(t, r, http.StatusOK)
			if got := r.header.Get("Content-Encoding"); got != test.want {
				t.Errorf("Accept-Encoding %q: got Content-Encoding %q, want %q", test.accept, got, test.want)
				continue
			}
			if !strings.Contains(strings.ToLower(strings.Join(r.header.Values("Vary"), ",")), "accept-encoding") {
				t.Errorf("Accept-Encoding %q: Vary %q lacks Accept-Encoding", test.accept, r.header.Values("Vary"))
			}
			if len(r.body) >= len(plain.body) {
				t.Errorf("Accept-Encoding %q: %d bytes compressed, %d plain", test.accept, len(r.body), len(plain.body))
			}
			got := decompress(t, test.want, r.body)
			if diff := cmp.Diff(want, jsonValue(t, got)); diff != "" {
				t.Errorf("Accept-Encoding %q: decompressed answer differs (-plain +decompressed):\n%s", test.accept, diff)
			}
		}
	})

	t.Run("small and operator answers", func(t *testing.T) {
		for _, path := range []string{"/v1/ping", "/readyz", "/livez"} {
			r := e.do(t, http.MethodGet, path, "", "Accept-Encoding", "gzip, zstd")
			if r.code/100 != 2 {
				t.Errorf("GET %s: got %d", path, r.code)
			}
			if ce := r.header.Get("Content-Encoding"); ce != "" {
				t.Errorf("GET %s: got Content-Encoding %q, want none", path, ce)
			}
		}
		r := e.do(t, http.MethodGet, "/v1/ping", "", "Accept-Encoding", "gzip, zstd")
		if diff := cmp.Diff(map[string]any{"message": "pong"}, r.json(t)); diff != "" {
			t.Errorf("GET /v1/ping (-want +got):\n%s", diff)
		}
	})

	t.Run("request bodies", func(t *testing.T) {
		for coding, encode := range map[string]func(*testing.T, []byte) []byte{"gzip": gzipBytes, "zstd": zstdBytes} {
			name := "user-" + coding
			body := encode(t, []byte(`{"username":"`+name+`","password":"password1"}`))
			r := e.do(t, http.MethodPost, "/v1/accounts", string(body), "Content-Encoding", coding)
			wantCode(t, r, http.StatusOK)
			if got := r.json(t)["username"]; got != name {
				t.Errorf("%s body: got username %v, want %s", coding, got, name)
			}
		}
	})

	t.Run("bad request bodies", func(t *testing.T) {
		valid := []byte(`{"username":"mallory","password":"password1"}`)
		for _, test := range []struct {
			name, coding string
			body         []byte
			httpCode     int
			code         codes.Code
		}{
			{"invalid gzip", "gzip", []byte("this is not gzip at all"), 400, codes.InvalidArgument},
			{"truncated gzip", "gzip", gzipBytes(t, valid)[:20], 400, codes.InvalidArgument},
			{"invalid zstd", "zstd", []byte("this is not zstd either"), 400, codes.InvalidArgument},
			{"truncated zstd", "zstd", zstdBytes(t, valid)[:12], 400, codes.InvalidArgument},
			{"unknown coding", "br", valid, 415, codes.InvalidArgument},
			{"two codings", "gzip, zstd", zstdBytes(t, gzipBytes(t, valid)), 415, codes.InvalidArgument},
			// 64 MiB of zeros in 64 KiB: over http.max_body_bytes (1 MiB)
			// only once decompressed.
			{"gzip bomb", "gzip", gzipBytes(t, make([]byte, 64<<20)), 413, codes.ResourceExhausted},
		} {
			r := e.do(t, http.MethodPost, "/v1/accounts", string(test.body), "Content-Encoding", test.coding)
			if r.code != test.httpCode {
				t.Errorf("%s: got HTTP %d, want %d; body %s", test.name, r.code, test.httpCode, r.body)
				continue
			}
			if st := r.status(t); codes.Code(st.GetCode()) != test.code {
				t.Errorf("%s: got status code %v, want %v", test.name, codes.Code(st.GetCode()), test.code)
			}
		}
		if n := e.count(t, `SELECT count(*) FROM accounts WHERE username = 'mallory'`); n != 0 {
			t.Errorf("got %d accounts from bad bodies, want 0", n)
		}
	})
}

// TestRESTCompressionMinBytes compresses the same answer under a threshold
// one byte above its size and one at its size.
func TestRESTCompressionMinBytes(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	size := len(e.do(t, http.MethodGet, "/v1/ping", "", "Accept-Encoding", "identity").body)
	for _, test := range []struct {
		minBytes   int
		compressed bool
	}{
		{size + 1, false},
		{size, true},
	} {
		t.Run(fmt.Sprint(test.minBytes), func(t *testing.T) {
			t.Parallel()
			e := newTestEnv(t, func(c *config.Config) { c.Compression.MinBytes = test.minBytes })
			for _, coding := range []string{"gzip", "zstd"} {
				r := e.do(t, http.MethodGet, "/v1/ping", "", "Accept-Encoding", coding)
				wantCode(t, r, http.StatusOK)
				got := r.header.Get("Content-Encoding")
				if test.compressed != (got == coding) || (!test.compressed && got != "") {
					t.Errorf("%d-byte answer at min_bytes %d, %s accepted: Content-Encoding %q", size, test.minBytes, coding, got)
					continue
				}
				body := r.body
				if test.compressed {
					body = decompress(t, coding, body)
				}
				if len(body) != size {
					t.Errorf("%s: answer of %d bytes, want %d", coding, len(body), size)
				}
			}
		})
	}
}

// TestRESTDecompressionBomb sends a zstd body of a few KiB that expands to
// 1 GiB: it is answered 413 with a Status of code 8, and the server does not
// allocate anything near its size. Not parallel, so that the allocations
// counted are this request's.
func TestRESTDecompressionBomb(t *testing.T) {
	e := newTestEnv(t)
	waitReady(t, e)
	// Concatenated frames decode as one stream: 1024 frames of 1 MiB zeros.
	frame := zstdBytes(t, make([]byte, 1<<20))
	bomb := bytes.Repeat(frame, 1024)
	t.Logf("bomb: %d bytes expanding to 1 GiB", len(bomb))

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	r := e.do(t, http.MethodPost, "/v1/accounts", string(bomb), "Content-Encoding", "zstd")
	took := time.Since(start)
	runtime.ReadMemStats(&after)

	st := wantRESTError(t, r, http.StatusRequestEntityTooLarge, codes.ResourceExhausted, "")
	if st.GetCode() != 8 {
		t.Errorf("status code: got %d, want 8", st.GetCode())
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("rejected in %v; %d KiB allocated in the whole process meanwhile, heap %d -> %d KiB",
		took, allocated>>10, before.HeapAlloc>>10, after.HeapAlloc>>10)
	if allocated > 64<<20 {
		t.Errorf("%d MiB allocated while rejecting the bomb, want at most 64 MiB", allocated>>20)
	}
}

// TestGRPCCompression creates and reads an account with each compressor.
func TestGRPCCompression(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	for _, name := range []string{"gzip", "zstd"} {
		t.Run(name, func(t *testing.T) {
			username := "grpc-" + name
			created, err := e.account.CreateAccount(t.Context(), &shebav1.CreateAccountRequest{Username: username, Password: "password1"}, grpc.UseCompressor(name))
			if err != nil {
				t.Fatalf("CreateAccount with %s: %v", name, err)
			}
			got, err := e.account.GetAccount(t.Context(), &shebav1.GetAccountRequest{AccountId: created.GetAccount().GetId()}, grpc.UseCompressor(name))
			if err != nil {
				t.Fatalf("GetAccount with %s: %v", name, err)
			}
			if got.GetAccount().GetUsername() != username {
				t.Errorf("GetAccount with %s: got %v, want %s", name, got.GetAccount(), username)
			}
		})
	}
}

// cborDecMode decodes like an independent client: maps with text keys,
// tag 0 and 1 as time.Time, integers as uint64 or int64.
var cborDecMode = func() cbor.DecMode {
	dm, err := cbor.DecOptions{
		DefaultMapType: reflect.TypeFor[map[string]any](),
		TimeTagToAny:   cbor.TimeTagToTime,
	}.DecMode()
	if err != nil {
		panic(err)
	}
	return dm
}()

// cborDo sends a REST request with body (if not nil) in CBOR, asking for a
// CBOR answer.
func (e *testEnv) cborDo(t *testing.T, method, path string, body any, header ...string) restResponse {
	t.Helper()
	var b []byte
	if body != nil {
		var err error
		if b, err = cbor.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	h := append([]string{"Content-Type", "application/cbor", "Accept", "application/cbor"}, header...)
	return e.do(t, method, path, string(b), h...)
}

// cbor decodes a CBOR answer, checking its Content-Type.
func (r restResponse) cbor(t *testing.T) any {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/cbor" {
		t.Fatalf("Content-Type: got %q, want application/cbor; body %q", ct, r.body)
	}
	var v any
	if err := cborDecMode.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("body %x is not CBOR: %v", r.body, err)
	}
	return v
}

// view makes a decoded answer comparable across JSON and CBOR: numbers
// become float64 (JSON numbers and CBOR integers alike), timestamps
// time.Time (tag 0 in CBOR; in JSON the RFC 3339 string of a field named
// "...Time").
func view(t *testing.T, v any) any {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			if s, ok := x.(string); ok && strings.HasSuffix(k, "Time") {
				ts, err := time.Parse(time.RFC3339Nano, s)
				if err != nil {
					t.Fatalf("%s: %q is not RFC 3339: %v", k, s, err)
				}
				out[k] = ts
				continue
			}
			out[k] = view(t, x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = view(t, x)
		}
		return out
	case uint64:
		return float64(v)
	case int64:
		return float64(v)
	}
	return v
}

// wantTimeTag checks that a CBOR value is a timestamp that came as tag 0.
func wantTimeTag(t *testing.T, name string, v any) time.Time {
	t.Helper()
	ts, ok := v.(time.Time)
	if !ok {
		t.Fatalf("%s: got %#v, want a tag 0 timestamp", name, v)
	}
	return ts
}

// cborSameAsJSON sends one GET as CBOR twice and as JSON: the CBOR answers
// are the same bytes, and the same document as the JSON answer.
func (e *testEnv) cborSameAsJSON(t *testing.T, path string, wantCode int) any {
	t.Helper()
	c := e.cborDo(t, http.MethodGet, path, nil)
	if c.code != wantCode {
		t.Fatalf("CBOR GET %s: got HTTP %d, want %d; body %x", path, c.code, wantCode, c.body)
	}
	if again := e.cborDo(t, http.MethodGet, path, nil); !bytes.Equal(c.body, again.body) {
		t.Errorf("CBOR GET %s twice: different bytes\n%x\n%x", path, c.body, again.body)
	}
	j := e.do(t, http.MethodGet, path, "")
	if j.code != wantCode {
		t.Fatalf("JSON GET %s: got HTTP %d, want %d; body %s", path, j.code, wantCode, j.body)
	}
	got := view(t, c.cbor(t))
	if diff := cmp.Diff(view(t, jsonValue(t, j.body)), got); diff != "" {
		t.Errorf("GET %s: CBOR and JSON differ (-json +cbor):\n%s", path, diff)
	}
	checkDiagnostic(t, c.body)
	return got
}

// checkDiagnostic checks, in the diagnostic notation of RFC 8949 §8, that
// every timestamp is text in tag 0 and that no other tag is used.
func checkDiagnostic(t *testing.T, b []byte) {
	t.Helper()
	diag, err := cbor.Diagnose(b)
	if err != nil {
		t.Fatalf("diagnose %x: %v", b, err)
	}
	for _, m := range tagRE.FindAllStringSubmatch(diag, -1) {
		if m[1] != "0" {
			t.Errorf("answer uses tag %s: %s", m[1], diag)
		}
	}
	for _, m := range timeFieldRE.FindAllStringSubmatch(diag, -1) {
		if m[2] != `0("` {
			t.Errorf("%s is not text in tag 0: %s", m[1], diag)
		}
	}
}

var (
	tagRE       = regexp.MustCompile(`(?:^|[\s\[{:,])(\d+)\(`)
	timeFieldRE = regexp.MustCompile(`"(\w+Time)":\s*(.{0,3})`)
)

// TestCBOROverEveryRPC calls every REST route in CBOR: reads give the JSON
// answer's document, writes the documented shape, errors a CBOR
// google.rpc.Status, and each answer is deterministic.
func TestCBOROverEveryRPC(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	before := time.Now().Add(-time.Minute)

	if diff := cmp.Diff(map[string]any{"message": "pong"}, e.cborSameAsJSON(t, "/v1/ping", 200)); diff != "" {
		t.Errorf("Ping (-want +got):\n%s", diff)
	}

	// CreateAccount: the bare Account.
	r := e.cborDo(t, http.MethodPost, "/v1/accounts", map[string]any{"username": "cbor.user", "password": "password1"})
	wantCode(t, r, http.StatusOK)
	checkDiagnostic(t, r.body)
	account, _ := r.cbor(t).(map[string]any)
	id, _ := account["id"].(string)
	if len(account) != 3 || len(id) != 36 || account["username"] != "cbor.user" ||
		wantTimeTag(t, "createTime", account["createTime"]).Before(before) {
		t.Fatalf("CreateAccount: got %#v, want {id, username, createTime}", account)
	}

	// Login: {"account": Account}.
	r = e.cborDo(t, http.MethodPost, "/v1/accounts:login", map[string]any{"username": "cbor.user", "password": "password1"})
	wantCode(t, r, http.StatusOK)
	if diff := cmp.Diff(map[string]any{"account": account}, r.cbor(t)); diff != "" {
		t.Errorf("Login (-want +got):\n%s", diff)
	}

	if diff := cmp.Diff(account, e.cborSameAsJSON(t, "/v1/accounts/"+id, 200)); diff != "" {
		t.Errorf("GetAccount (-created +got):\n%s", diff)
	}

	// CreateSubscription: the bare Subscription, active, no cancelTime.
	r = e.cborDo(t, http.MethodPost, "/v1/accounts/"+id+"/subscription", map[string]any{"plan": "pro"})
	wantCode(t, r, http.StatusOK)
	sub, _ := r.cbor(t).(map[string]any)
	subID, _ := sub["id"].(string)
	if len(sub) != 5 || len(subID) != 36 || sub["accountId"] != id || sub["plan"] != "pro" ||
		sub["status"] != "SUBSCRIPTION_STATUS_ACTIVE" || wantTimeTag(t, "createTime", sub["createTime"]).Before(before) {
		t.Fatalf("CreateSubscription: got %#v, want {id, accountId, plan, status, createTime}", sub)
	}
	if diff := cmp.Diff(sub, e.cborSameAsJSON(t, "/v1/accounts/"+id+"/subscription", 200)); diff != "" {
		t.Errorf("GetSubscription (-created +got):\n%s", diff)
	}

	// CancelSubscription, with no body at all: canceled, with cancelTime.
	r = e.cborDo(t, http.MethodPost, "/v1/accounts/"+id+"/subscription:cancel", nil)
	wantCode(t, r, http.StatusOK)
	canceled, _ := r.cbor(t).(map[string]any)
	cancelTime := wantTimeTag(t, "cancelTime", canceled["cancelTime"])
	want := map[string]any{"cancelTime": cancelTime, "status": "SUBSCRIPTION_STATUS_CANCELED"}
	for _, k := range []string{"id", "accountId", "plan", "createTime"} {
		want[k] = sub[k]
	}
	if diff := cmp.Diff(want, canceled); diff != "" {
		t.Errorf("CancelSubscription (-want +got):\n%s", diff)
	}
	checkDiagnostic(t, r.body)

	// ListSubscriptions: one canceled and one active, in pages.
	if _, err := e.sub.CreateSubscription(t.Context(), &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "basic"}); err != nil {
		t.Fatal(err)
	}
	page, _ := e.cborSameAsJSON(t, "/v1/subscriptions?page_size=1", 200).(map[string]any)
	token, _ := page["nextPageToken"].(string)
	if subs, _ := page["subscriptions"].([]any); len(subs) != 1 || token == "" {
		t.Fatalf("first page of 1: got %#v", page)
	}
	last, _ := e.cborSameAsJSON(t, "/v1/subscriptions?page_size=1&page_token="+token, 200).(map[string]any)
	if diff := cmp.Diff(map[string]any{"subscriptions": []any{canceled}, "nextPageToken": ""}, last); diff != "" {
		t.Errorf("last page (-want +got):\n%s", diff)
	}
	all, _ := e.cborSameAsJSON(t, "/v1/subscriptions", 200).(map[string]any)
	if subs, _ := all["subscriptions"].([]any); len(subs) != 2 {
		t.Errorf("full list: got %#v, want 2 subscriptions", all)
	}

	// Errors answer in CBOR too, with the JSON error's document.
	r = e.cborDo(t, http.MethodPost, "/v1/accounts", map[string]any{"username": "NO!", "password": "password1"})
	wantCode(t, r, http.StatusBadRequest)
	st, _ := r.cbor(t).(map[string]any)
	details, _ := st["details"].([]any)
	detail, _ := func() (map[string]any, bool) {
		// The ErrorInfo, then the BadRequest.
		if len(details) != 2 {
			return nil, false
		}
		if info, _ := details[0].(map[string]any); info["reason"] != "INVALID_ARGUMENT" {
			return nil, false
		}
		d, ok := details[1].(map[string]any)
		return d, ok
	}()
	if st["code"] != uint64(codes.InvalidArgument) || detail["@type"] != "type.googleapis.com/google.rpc.BadRequest" {
		t.Fatalf("invalid username in CBOR: got %#v, want a Status of code 3 with ErrorInfo and BadRequest details", st)
	}
	if fv, _ := detail["fieldViolations"].([]any); len(fv) == 0 || fv[0].(map[string]any)["field"] != "username" {
		t.Errorf("invalid username in CBOR: violations %#v, want one of username", detail["fieldViolations"])
	}
	j := e.do(t, http.MethodPost, "/v1/accounts", `{"username":"NO!","password":"password1"}`)
	if diff := cmp.Diff(view(t, jsonValue(t, j.body)), view(t, st)); diff != "" {
		t.Errorf("invalid username: CBOR and JSON errors differ (-json +cbor):\n%s", diff)
	}
	nf, _ := e.cborSameAsJSON(t, "/v1/accounts/"+unknownID, 404).(map[string]any)
	if nf["code"] != float64(codes.NotFound) {
		t.Errorf("unknown account in CBOR: got %#v, want a Status of code 5", nf)
	}
}

// TestCBORBadInput: what cannot be decoded is 400, what is not spoken 415,
// and an Accept of nothing known gets JSON. Never 500.
func TestCBORBadInput(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	valid, err := cbor.Marshal(map[string]any{"username": "oscar", "password": "password1"})
	if err != nil {
		t.Fatal(err)
	}
	mustCBOR := func(v any) string {
		b, err := cbor.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, test := range []struct {
		name, contentType, body string
		httpCode                int
	}{
		{"truncated", "application/cbor", string(valid[:len(valid)-3]), 400},
		{"only a map header", "application/cbor", string(valid[:1]), 400},
		{"invalid", "application/cbor", "\xff\xff\xff", 400},
		{"trailing bytes", "application/cbor", string(valid) + "\x00", 400},
		{"unknown field", "application/cbor", mustCBOR(map[string]any{"username": "oscar", "password": "password1", "admin": true}), 400},
		{"wrong type", "application/cbor", mustCBOR(map[string]any{"username": 42, "password": "password1"}), 400},
		{"not a map", "application/cbor", mustCBOR([]any{1, 2}), 400},
		{"JSON sent as CBOR", "application/cbor", `{"username":"oscar","password":"password1"}`, 400},
		{"CBOR sent as JSON", "application/json", string(valid), 400},
		{"CBOR sequence", "application/cbor-seq", string(valid), 415},
		{"XML", "application/xml", string(valid), 415},
	} {
		t.Run(test.name, func(t *testing.T) {
			for _, accept := range []string{"application/cbor", "application/json"} {
				r := e.do(t, http.MethodPost, "/v1/accounts", test.body, "Content-Type", test.contentType, "Accept", accept)
				if r.code != test.httpCode {
					t.Fatalf("Accept %s: got HTTP %d, want %d; body %q", accept, r.code, test.httpCode, r.body)
				}
				var code any
				if accept == "application/cbor" {
					st, _ := r.cbor(t).(map[string]any)
					code = st["code"]
				} else {
					code = uint64(r.status(t).GetCode())
				}
				if code != uint64(codes.InvalidArgument) {
					t.Errorf("Accept %s: got status code %v, want 3; body %q", accept, code, r.body)
				}
			}
		})
	}
	if n := e.count(t, `SELECT count(*) FROM accounts`); n != 0 {
		t.Errorf("got %d accounts after bad bodies, want 0", n)
	}

	// An Accept of nothing sheba speaks gets JSON.
	for _, accept := range []string{"text/html", "text/html, application/xhtml+xml;q=0.9", "image/png"} {
		r := e.do(t, http.MethodGet, "/v1/ping", "", "Accept", accept)
		wantCode(t, r, http.StatusOK)
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Accept %q: Content-Type %q, want application/json", accept, ct)
		}
		if diff := cmp.Diff(map[string]any{"message": "pong"}, r.json(t)); diff != "" {
			t.Errorf("Accept %q (-want +got):\n%s", accept, diff)
		}
		r = e.do(t, http.MethodGet, "/v1/accounts/"+unknownID, "", "Accept", accept)
		wantRESTError(t, r, http.StatusNotFound, codes.NotFound, "")
	}
}

// TestCBORAcceptNegotiation: the answer is in the type Accept prefers, q-values
// and wildcards included; the body's type when Accept leaves the choice
// open; JSON when Accept names nothing sheba speaks.
func TestCBORAcceptNegotiation(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	cborBody, err := cbor.Marshal(map[string]any{"username": "NO!", "password": "password1"})
	if err != nil {
		t.Fatal(err)
	}
	const jsonBody = `{"username":"NO!","password":"password1"}`
	const asCBOR, asJSON = "application/cbor", "application/json"
	for _, test := range []struct {
		accept   string
		get      string // answer type of GET /v1/ping
		postCBOR string // of POST /v1/accounts with a CBOR body
		postJSON string // of POST /v1/accounts with a JSON body
	}{
		{"", asJSON, asCBOR, asJSON},
		{"application/cbor", asCBOR, asCBOR, asCBOR},
		{"application/json", asJSON, asJSON, asJSON},
		{"text/html", asJSON, asJSON, asJSON},
		{"*/*", asJSON, asCBOR, asJSON},
		{"application/cbor;q=0.9, */*;q=0.1", asCBOR, asCBOR, asCBOR},
		{"application/json;q=0.5, application/cbor", asCBOR, asCBOR, asCBOR},
		{"application/cbor;q=0.5, application/json", asJSON, asJSON, asJSON},
		{"application/cbor;q=0, text/html", asJSON, asJSON, asJSON},
	} {
		for _, c := range []struct {
			method, path, contentType, body, want string
		}{
			{http.MethodGet, "/v1/ping", "", "", test.get},
			{http.MethodPost, "/v1/accounts", asCBOR, string(cborBody), test.postCBOR},
			{http.MethodPost, "/v1/accounts", asJSON, jsonBody, test.postJSON},
		} {
			r := e.do(t, c.method, c.path, c.body, "Content-Type", c.contentType, "Accept", test.accept)
			if !slices.Contains(strings.Split(strings.ReplaceAll(strings.Join(r.header.Values("Vary"), ","), " ", ""), ","), "Accept") {
				t.Errorf("%s %s: no Vary: Accept although the answer's type follows it", c.method, c.path)
			}
			if got := r.header.Get("Content-Type"); got != c.want {
				t.Errorf("%s %s (%s) with Accept %q: answered %q, want %q", c.method, c.path, c.contentType, test.accept, got, c.want)
				continue
			}
			var doc any
			if c.want == asCBOR {
				doc = r.cbor(t)
			} else {
				doc = jsonValue(t, r.body)
			}
			if m, _ := doc.(map[string]any); (c.method == http.MethodGet) != (m["message"] == "pong") {
				t.Errorf("%s %s with Accept %q: got %v", c.method, c.path, test.accept, doc)
			}
		}
	}
}
