package gateway_test

import (
	"bytes"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// CBOR on REST (docs/api.md): the JSON mapping's document in RFC 8949 core
// deterministic encoding, chosen by Content-Type and Accept.

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

// cborBytes encodes v in CBOR.
func cborBytes(t *testing.T, v any) []byte {
	t.Helper()
	b, err := cbor.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cborDo sends a REST request with body (if not nil) in CBOR, asking for a
// CBOR answer.
func (g *testGateway) cborDo(t *testing.T, method, path string, body any, header ...string) response {
	t.Helper()
	var b []byte
	if body != nil {
		b = cborBytes(t, body)
	}
	h := append([]string{"Content-Type", "application/cbor", "Accept", "application/cbor"}, header...)
	return g.do(t, method, path, string(b), h...)
}

// cborOf decodes a CBOR answer, checking its Content-Type.
func cborOf(t *testing.T, r response) any {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); ct != "application/cbor" {
		t.Fatalf("Content-Type: got %q, want application/cbor; body %q", ct, r.Body)
	}
	var v any
	if err := cborDecMode.Unmarshal(r.Body, &v); err != nil {
		t.Fatalf("body %x is not CBOR: %v", r.Body, err)
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
func (g *testGateway) cborSameAsJSON(t *testing.T, path string, wantCode int) any {
	t.Helper()
	c := g.cborDo(t, http.MethodGet, path, nil)
	if c.Code != wantCode {
		t.Fatalf("CBOR GET %s: got HTTP %d, want %d; body %x", path, c.Code, wantCode, c.Body)
	}
	if again := g.cborDo(t, http.MethodGet, path, nil); !bytes.Equal(c.Body, again.Body) {
		t.Errorf("CBOR GET %s twice: different bytes\n%x\n%x", path, c.Body, again.Body)
	}
	j := g.do(t, http.MethodGet, path, "")
	if j.Code != wantCode {
		t.Fatalf("JSON GET %s: got HTTP %d, want %d; body %s", path, j.Code, wantCode, j.Body)
	}
	got := view(t, cborOf(t, c))
	if diff := cmp.Diff(view(t, jsonValue(t, j.Body)), got); diff != "" {
		t.Errorf("GET %s: CBOR and JSON differ (-json +cbor):\n%s", path, diff)
	}
	checkDiagnostic(t, c.Body)
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
	g := newTestGateway(t)
	before := time.Now().Add(-time.Minute)

	if diff := cmp.Diff(map[string]any{"message": "pong"}, g.cborSameAsJSON(t, "/v1/ping", 200)); diff != "" {
		t.Errorf("Ping (-want +got):\n%s", diff)
	}

	// CreateAccount: the bare Account.
	r := g.cborDo(t, http.MethodPost, "/v1/accounts", map[string]any{"username": "cbor.user", "password": "password1"})
	wantCode(t, r, http.StatusOK)
	checkDiagnostic(t, r.Body)
	account, _ := cborOf(t, r).(map[string]any)
	id, _ := account["id"].(string)
	if len(account) != 3 || len(id) != 36 || account["username"] != "cbor.user" ||
		wantTimeTag(t, "createTime", account["createTime"]).Before(before) {
		t.Fatalf("CreateAccount: got %#v, want {id, username, createTime}", account)
	}

	// Login: {"account": Account}.
	r = g.cborDo(t, http.MethodPost, "/v1/accounts:login", map[string]any{"username": "cbor.user", "password": "password1"})
	wantCode(t, r, http.StatusOK)
	if diff := cmp.Diff(map[string]any{"account": account}, cborOf(t, r)); diff != "" {
		t.Errorf("Login (-want +got):\n%s", diff)
	}

	if diff := cmp.Diff(account, g.cborSameAsJSON(t, "/v1/accounts/"+id, 200)); diff != "" {
		t.Errorf("GetAccount (-created +got):\n%s", diff)
	}

	// CreateSubscription: the bare Subscription, active, no cancelTime,
	// its etag also the ETag header.
	r = g.cborDo(t, http.MethodPost, "/v1/accounts/"+id+"/subscription", map[string]any{"plan": "pro"})
	wantCode(t, r, http.StatusOK)
	sub, _ := cborOf(t, r).(map[string]any)
	subID, _ := sub["id"].(string)
	if len(sub) != 6 || len(subID) != 36 || sub["accountId"] != id || sub["plan"] != "pro" ||
		sub["status"] != "SUBSCRIPTION_STATUS_ACTIVE" || wantTimeTag(t, "createTime", sub["createTime"]).Before(before) {
		t.Fatalf("CreateSubscription: got %#v, want {id, accountId, plan, status, createTime, etag}", sub)
	}
	wantETagHeader(t, r, sub)
	if diff := cmp.Diff(sub, g.cborSameAsJSON(t, "/v1/accounts/"+id+"/subscription", 200)); diff != "" {
		t.Errorf("GetSubscription (-created +got):\n%s", diff)
	}

	// CancelSubscription, with no body at all: canceled, with cancelTime.
	r = g.cborDo(t, http.MethodPost, "/v1/accounts/"+id+"/subscription:cancel", nil)
	wantCode(t, r, http.StatusOK)
	canceled, _ := cborOf(t, r).(map[string]any)
	cancelTime := wantTimeTag(t, "cancelTime", canceled["cancelTime"])
	want := map[string]any{"cancelTime": cancelTime, "status": "SUBSCRIPTION_STATUS_CANCELED", "etag": canceled["etag"]}
	for _, k := range []string{"id", "accountId", "plan", "createTime"} {
		want[k] = sub[k]
	}
	if diff := cmp.Diff(want, canceled); diff != "" {
		t.Errorf("CancelSubscription (-want +got):\n%s", diff)
	}
	if canceled["etag"] == sub["etag"] {
		t.Errorf("CancelSubscription: etag %q unchanged", sub["etag"])
	}
	wantETagHeader(t, r, canceled)
	checkDiagnostic(t, r.Body)

	// ListSubscriptions: one canceled and one active, in pages.
	if _, err := g.sub.CreateSubscription(t.Context(), &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "basic"}); err != nil {
		t.Fatal(err)
	}
	page, _ := g.cborSameAsJSON(t, "/v1/subscriptions?page_size=1", 200).(map[string]any)
	token, _ := page["nextPageToken"].(string)
	if subs, _ := page["subscriptions"].([]any); len(subs) != 1 || token == "" {
		t.Fatalf("first page of 1: got %#v", page)
	}
	last, _ := g.cborSameAsJSON(t, "/v1/subscriptions?page_size=1&page_token="+token, 200).(map[string]any)
	if diff := cmp.Diff(map[string]any{"subscriptions": []any{canceled}, "nextPageToken": ""}, last); diff != "" {
		t.Errorf("last page (-want +got):\n%s", diff)
	}
	all, _ := g.cborSameAsJSON(t, "/v1/subscriptions", 200).(map[string]any)
	if subs, _ := all["subscriptions"].([]any); len(subs) != 2 {
		t.Errorf("full list: got %#v, want 2 subscriptions", all)
	}

	// Errors answer in CBOR too, with the JSON error's document.
	r = g.cborDo(t, http.MethodPost, "/v1/accounts", map[string]any{"username": "NO!", "password": "password1"})
	wantCode(t, r, http.StatusBadRequest)
	st, _ := cborOf(t, r).(map[string]any)
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
	j := g.do(t, http.MethodPost, "/v1/accounts", `{"username":"NO!","password":"password1"}`)
	if diff := cmp.Diff(view(t, jsonValue(t, j.Body)), view(t, st)); diff != "" {
		t.Errorf("invalid username: CBOR and JSON errors differ (-json +cbor):\n%s", diff)
	}
	nf, _ := g.cborSameAsJSON(t, "/v1/accounts/"+unknownID, 404).(map[string]any)
	if nf["code"] != float64(codes.NotFound) {
		t.Errorf("unknown account in CBOR: got %#v, want a Status of code 5", nf)
	}
}

// TestCBORBadInput: what cannot be decoded is 400, what is not spoken 415,
// and an Accept of nothing known gets JSON. Never 500.
func TestCBORBadInput(t *testing.T) {
	t.Parallel()
	g := newTestGateway(t)
	valid := cborBytes(t, map[string]any{"username": "oscar", "password": "password1"})
	mustCBOR := func(v any) string { return string(cborBytes(t, v)) }
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
				r := g.do(t, http.MethodPost, "/v1/accounts", test.body, "Content-Type", test.contentType, "Accept", accept)
				if r.Code != test.httpCode {
					t.Fatalf("Accept %s: got HTTP %d, want %d; body %q", accept, r.Code, test.httpCode, r.Body)
				}
				var code any
				if accept == "application/cbor" {
					st, _ := cborOf(t, r).(map[string]any)
					code = st["code"]
				} else {
					code = uint64(r.Status(t).GetCode())
				}
				if code != uint64(codes.InvalidArgument) {
					t.Errorf("Accept %s: got status code %v, want 3; body %q", accept, code, r.Body)
				}
			}
		})
	}
	if n := g.count(t, `SELECT count(*) FROM accounts`); n != 0 {
		t.Errorf("got %d accounts after bad bodies, want 0", n)
	}

	// An Accept of nothing sheba speaks gets JSON.
	for _, accept := range []string{"text/html", "text/html, application/xhtml+xml;q=0.9", "image/png"} {
		r := g.do(t, http.MethodGet, "/v1/ping", "", "Accept", accept)
		wantCode(t, r, http.StatusOK)
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Accept %q: Content-Type %q, want application/json", accept, ct)
		}
		if diff := cmp.Diff(map[string]any{"message": "pong"}, jsonValue(t, r.Body)); diff != "" {
			t.Errorf("Accept %q (-want +got):\n%s", accept, diff)
		}
		r = g.do(t, http.MethodGet, "/v1/accounts/"+unknownID, "", "Accept", accept)
		wantError(t, r, http.StatusNotFound, codes.NotFound)
	}
}

// TestCBORAcceptNegotiation: the answer is in the type Accept prefers, q-values
// and wildcards included; the body's type when Accept leaves the choice
// open; JSON when Accept names nothing sheba speaks.
func TestCBORAcceptNegotiation(t *testing.T) {
	t.Parallel()
	g := newTestGateway(t)
	cborBody := cborBytes(t, map[string]any{"username": "NO!", "password": "password1"})
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
			r := g.do(t, c.method, c.path, c.body, "Content-Type", c.contentType, "Accept", test.accept)
			if !slices.Contains(strings.Split(strings.ReplaceAll(strings.Join(r.Header.Values("Vary"), ","), " ", ""), ","), "Accept") {
				t.Errorf("%s %s: no Vary: Accept although the answer's type follows it", c.method, c.path)
			}
			if got := r.Header.Get("Content-Type"); got != c.want {
				t.Errorf("%s %s (%s) with Accept %q: answered %q, want %q", c.method, c.path, c.contentType, test.accept, got, c.want)
				continue
			}
			var doc any
			if c.want == asCBOR {
				doc = cborOf(t, r)
			} else {
				doc = jsonValue(t, r.Body)
			}
			if m, _ := doc.(map[string]any); (c.method == http.MethodGet) != (m["message"] == "pong") {
				t.Errorf("%s %s with Accept %q: got %v", c.method, c.path, test.accept, doc)
			}
		}
	}
}

// TestCBORRequestLimits sends CBOR request bodies over the tight request
// limits: 400 saying which limit, before any field is looked at (unknown
// fields and wrong types would be 400 too, with another message).
func TestCBORRequestLimits(t *testing.T) {
	t.Parallel()
	g := newTestGateway(t)
	pairs := map[string]any{"username": "cbor-user", "password": "correct horse"}
	for i := range 100 {
		pairs[fmt.Sprintf("k%d", i)] = i
	}
	for _, tc := range []struct {
		name string
		body any
	}{
		{"100 map pairs", pairs},
		{"a 1000-element array", map[string]any{"username": make([]int, 1000)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := g.do(t, http.MethodPost, "/v1/accounts", string(cborBytes(t, tc.body)), "Content-Type", "application/cbor")
			if r.Code != http.StatusBadRequest || !bytes.Contains(r.Body, []byte("exceeded max")) {
				t.Errorf("got HTTP %d %q, want 400 naming the exceeded limit", r.Code, r.Body)
			}
		})
	}
	if n := g.count(t, `SELECT count(*) FROM accounts`); n != 0 {
		t.Errorf("got %d accounts, want 0", n)
	}
}
