package gateway_test

import (
	"bytes"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/shebasvc/sheba/e2e/resttest"
	"github.com/shebasvc/sheba/server/gateway"
)

// ETags on REST (docs/api.md#etags): the etag of a Subscription in its
// body and its ETag header, CancelSubscription's etag field (409) and
// If-Match (412), in JSON and CBOR.

// etagRE is the shape of an etag: 16 characters of base64url.
var etagRE = regexp.MustCompile(`^[A-Za-z0-9_-]{16}$`)

// wantETagHeader checks that the answer r, whose decoded body is sub,
// carries sub's etag, well formed, as its ETag header: quoted, strong.
func wantETagHeader(t *testing.T, r response, sub any) {
	t.Helper()
	m, _ := sub.(map[string]any)
	e, _ := m["etag"].(string)
	if !etagRE.MatchString(e) {
		t.Errorf("etag %q in %v: want 16 characters of base64url", e, sub)
	}
	if got := r.Header.Values("ETag"); len(got) != 1 || got[0] != `"`+e+`"` {
		t.Errorf("ETag header: got %q, want [%q]", got, `"`+e+`"`)
	}
}

// etagOf returns the etag of a decoded Subscription, which must have one.
func etagOf(t *testing.T, sub map[string]any) string {
	t.Helper()
	e, _ := sub["etag"].(string)
	if !etagRE.MatchString(e) {
		t.Fatalf("etag %q in %v: want 16 characters of base64url", e, sub)
	}
	return e
}

// wantNoETagHeader checks that r carries no ETag header.
func wantNoETagHeader(t *testing.T, what string, r response) {
	t.Helper()
	if got := r.Header.Values("ETag"); len(got) > 0 {
		t.Errorf("%s: ETag header %q, want none", what, got)
	}
}

// newSubscription creates an account of username with an active
// subscription over REST, and returns the account's id and the
// subscription as answered.
func (g *testGateway) newSubscription(t *testing.T, username string) (string, map[string]any) {
	t.Helper()
	r := g.do(t, http.MethodPost, "/v1/accounts", `{"username":"`+username+`","password":"password1"}`)
	wantCode(t, r, http.StatusOK)
	id, _ := r.JSON(t)["id"].(string)
	r = g.do(t, http.MethodPost, "/v1/accounts/"+id+"/subscription", `{"plan":"pro"}`)
	wantCode(t, r, http.StatusOK)
	sub := r.JSON(t)
	wantETagHeader(t, r, sub)
	return id, sub
}

// wantETagMismatch checks an ETAG_MISMATCH answer of HTTP status
// httpCode, in JSON or CBOR: code 10 (ABORTED) and one ErrorInfo of reason
// ETAG_MISMATCH, and no ETag header.
func wantETagMismatch(t *testing.T, r response, httpCode int) {
	t.Helper()
	wantCode(t, r, httpCode)
	var body any
	if r.Header.Get("Content-Type") == "application/cbor" {
		body = view(t, cborOf(t, r))
	} else {
		body = jsonValue(t, r.Body)
	}
	st, _ := body.(map[string]any)
	details, _ := st["details"].([]any)
	var reasons []any
	for _, d := range details {
		info, _ := d.(map[string]any)
		if typ, _ := info["@type"].(string); strings.HasSuffix(typ, "/google.rpc.ErrorInfo") {
			reasons = append(reasons, info["domain"], info["reason"])
		}
	}
	if st["code"] != float64(codes.Aborted) || len(reasons) != 2 || reasons[0] != "sheba" || reasons[1] != "ETAG_MISMATCH" {
		t.Errorf("got %v, want code 10 and one ErrorInfo sheba/ETAG_MISMATCH", body)
	}
	wantNoETagHeader(t, "ETAG_MISMATCH", r)
}

// activeVersion returns the version of the account's active subscription
// in the database, 0 when it has none.
func (g *testGateway) activeVersion(t *testing.T, accountID string) int {
	t.Helper()
	return g.count(t, `SELECT coalesce(max(version), 0) FROM subscriptions WHERE status = 'active' AND account_id = '`+accountID+`'`)
}

// TestETagHeader checks that every answer that carries a Subscription
// carries its etag as its ETag header, the same on every read until it
// changes, in JSON and CBOR, never compressed; and that other answers
// carry none.
func TestETagHeader(t *testing.T) {
	t.Parallel()
	// Every answer over 0 bytes is compressed, but those with an ETag.
	g := newTestGateway(t, func(o *gateway.Options) { o.CompressMinBytes = 0 })
	id, created := g.newSubscription(t, "erin")
	path := "/v1/accounts/" + id + "/subscription"

	for range 2 {
		r := g.do(t, http.MethodGet, path, "", "Accept-Encoding", "gzip, zstd")
		wantCode(t, r, http.StatusOK)
		if ce := r.Header.Get("Content-Encoding"); ce != "" {
			t.Errorf("GET %s: Content-Encoding %q, want none for an answer with an ETag", path, ce)
		}
		if h := r.Header.Values("No-Gzip-Compression"); len(h) > 0 {
			t.Errorf("GET %s: No-Gzip-Compression %q sent", path, h)
		}
		got := r.JSON(t)
		wantETagHeader(t, r, got)
		if got["etag"] != created["etag"] {
			t.Errorf("GET %s: etag %q, want the created one, %q", path, got["etag"], created["etag"])
		}
	}
	c := g.cborDo(t, http.MethodGet, path, nil)
	wantCode(t, c, http.StatusOK)
	wantETagHeader(t, c, cborOf(t, c))
	if c.Header.Get("ETag") != `"`+etagOf(t, created)+`"` {
		t.Errorf("CBOR GET %s: ETag %q, want the JSON answer's", path, c.Header.Get("ETag"))
	}

	// A list carries etags in its body, and no header: it is no one
	// resource. Answers without a Subscription are compressed as ever.
	for _, p := range []string{"/v1/subscriptions", "/v1/accounts/" + id, "/v1/ping"} {
		r := g.do(t, http.MethodGet, p, "", "Accept-Encoding", "gzip")
		wantCode(t, r, http.StatusOK)
		wantNoETagHeader(t, "GET "+p, r)
		if ce := r.Header.Get("Content-Encoding"); ce != "gzip" {
			t.Errorf("GET %s: Content-Encoding %q, want gzip (compression.min_bytes 0)", p, ce)
		}
	}
	r := g.do(t, http.MethodGet, "/v1/subscriptions", "", "Accept-Encoding", "identity")
	subs, _ := r.JSON(t)["subscriptions"].([]any)
	if len(subs) != 1 || subs[0].(map[string]any)["etag"] != created["etag"] {
		t.Errorf("GET /v1/subscriptions: got %s, want the subscription with its etag %q", r.Body, created["etag"])
	}
	// Errors carry none.
	wantNoETagHeader(t, "404", g.do(t, http.MethodGet, "/v1/accounts/"+unknownID+"/subscription", ""))
}

// TestCancelETagField checks CancelSubscription's etag field: another
// etag changes nothing and is 409 ABORTED ETAG_MISMATCH; the current one
// cancels, and the etag changes; without an active subscription it is 404
// whatever the etag.
func TestCancelETagField(t *testing.T) {
	t.Parallel()
	g := newTestGateway(t)
	id, sub := g.newSubscription(t, "frank")
	cancel := "/v1/accounts/" + id + "/subscription:cancel"
	stale := "AAAAAAAAAAAAAAAA"

	wantETagMismatch(t, g.do(t, http.MethodPost, cancel, `{"etag":"`+stale+`"}`), http.StatusConflict)
	wantETagMismatch(t, g.cborDo(t, http.MethodPost, cancel, map[string]any{"etag": stale}), http.StatusConflict)
	if v := g.activeVersion(t, id); v != 1 {
		t.Fatalf("after mismatches: active version %d, want 1 (nothing changed)", v)
	}
	r := g.do(t, http.MethodGet, "/v1/accounts/"+id+"/subscription", "")
	if got := r.JSON(t)["etag"]; got != sub["etag"] {
		t.Errorf("after mismatches: etag %q, want %q", got, sub["etag"])
	}

	r = g.do(t, http.MethodPost, cancel, `{"etag":"`+etagOf(t, sub)+`"}`)
	wantCode(t, r, http.StatusOK)
	canceled := r.JSON(t)
	wantETagHeader(t, r, canceled)
	if canceled["status"] != "SUBSCRIPTION_STATUS_CANCELED" || canceled["etag"] == sub["etag"] {
		t.Errorf("cancel with the current etag: got %s, want it canceled with another etag than %q", r.Body, sub["etag"])
	}
	if n := g.count(t, `SELECT count(*) FROM subscriptions WHERE status = 'canceled' AND version = 2 AND account_id = '`+id+`'`); n != 1 {
		t.Errorf("canceled subscriptions at version 2: got %d, want 1", n)
	}

	// 404 comes before the etag is looked at.
	for _, e := range []string{stale, etagOf(t, sub), etagOf(t, canceled)} {
		resttest.WantError(t, g.do(t, http.MethodPost, cancel, `{"etag":"`+e+`"}`), http.StatusNotFound, codes.NotFound, "")
	}
}

// cancel sends CancelSubscription for the account over REST, with the
// etag field (if not "") in its body, in JSON or CBOR, and the If-Match
// header lines ifMatch.
func (g *testGateway) cancel(t *testing.T, accountID, field string, ifMatch []string, cbor bool) response {
	t.Helper()
	body := map[string]any{}
	if field != "" {
		body["etag"] = field
	}
	contentType, b := "application/json", []byte(`{}`)
	if field != "" {
		b = []byte(`{"etag":"` + field + `"}`)
	}
	if cbor {
		contentType, b = "application/cbor", cborBytes(t, body)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, g.url+"/v1/accounts/"+accountID+"/subscription:cancel", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Accept", contentType)
	req.Header["If-Match"] = ifMatch
	return g.send(t, req)
}

// TestCancelIfMatch checks If-Match on CancelSubscription: its strong
// etag, `*` or a list that holds it cancels; another etag, a weak tag or a
// malformed value changes nothing and is 412, with the ETAG_MISMATCH body
// of a 409; 404 comes first.
func TestCancelIfMatch(t *testing.T) {
	t.Parallel()
	g := newTestGateway(t)
	const other = "AAAAAAAAAAAAAAAA"
	quoted := func(e string) string { return `"` + e + `"` }
	for i, test := range []struct {
		name    string
		ifMatch func(etag string) []string
		field   func(etag string) string // the body's etag field, "" none
		cbor    bool
		want    int
	}{
		{name: "current", ifMatch: func(e string) []string { return []string{quoted(e)} }, want: http.StatusOK},
		{name: "current, CBOR", ifMatch: func(e string) []string { return []string{quoted(e)} }, cbor: true, want: http.StatusOK},
		{name: "star", ifMatch: func(string) []string { return []string{"*"} }, want: http.StatusOK},
		{name: "list holding it", ifMatch: func(e string) []string { return []string{quoted(other) + ", " + quoted(e)} }, want: http.StatusOK},
		{name: "second line", ifMatch: func(e string) []string { return []string{quoted(other), quoted(e)} }, want: http.StatusOK},
		{name: "current, and the field", ifMatch: func(e string) []string { return []string{quoted(e)} },
			field: func(e string) string { return e }, want: http.StatusOK},
		{name: "another", ifMatch: func(string) []string { return []string{quoted(other)} }, want: http.StatusPreconditionFailed},
		{name: "another, CBOR", ifMatch: func(string) []string { return []string{quoted(other)} }, cbor: true, want: http.StatusPreconditionFailed},
		{name: "list without it", ifMatch: func(string) []string { return []string{quoted(other) + `, "BBBBBBBBBBBBBBBB"`} }, want: http.StatusPreconditionFailed},
		{name: "weak", ifMatch: func(e string) []string { return []string{"W/" + quoted(e)} }, want: http.StatusPreconditionFailed},
		{name: "unquoted", ifMatch: func(e string) []string { return []string{e} }, want: http.StatusPreconditionFailed},
		// Bytes that metadata cannot carry keep their meaning: a tag
		// with them names no etag of sheba's, and the list goes on.
		{name: "not ASCII", ifMatch: func(string) []string { return []string{`"é"`} }, want: http.StatusPreconditionFailed},
		{name: "not ASCII, then current", ifMatch: func(e string) []string { return []string{"\"é\",\t" + quoted(e)} }, want: http.StatusOK},
		// With both, both must hold, and a request that carried If-Match
		// is answered 412.
		{name: "current, the field another", ifMatch: func(e string) []string { return []string{quoted(e)} },
			field: func(string) string { return other }, want: http.StatusPreconditionFailed},
		{name: "another, the field current", ifMatch: func(string) []string { return []string{quoted(other)} },
			field: func(e string) string { return e }, want: http.StatusPreconditionFailed},
	} {
		t.Run(test.name, func(t *testing.T) {
			id, sub := g.newSubscription(t, fmt.Sprintf("user%d", i))
			e := etagOf(t, sub)
			field := ""
			if test.field != nil {
				field = test.field(e)
			}
			r := g.cancel(t, id, field, test.ifMatch(e), test.cbor)
			if test.want != http.StatusOK {
				wantETagMismatch(t, r, test.want)
				if v := g.activeVersion(t, id); v != 1 {
					t.Errorf("active version %d, want 1: nothing changed", v)
				}
				return
			}
			wantCode(t, r, http.StatusOK)
			var got any
			if test.cbor {
				got = cborOf(t, r)
			} else {
				got = r.JSON(t)
			}
			wantETagHeader(t, r, got)
			if m := got.(map[string]any); m["status"] != "SUBSCRIPTION_STATUS_CANCELED" || m["etag"] == e {
				t.Errorf("got %v, want it canceled, its etag no more %q", got, e)
			}
			if v := g.activeVersion(t, id); v != 0 {
				t.Errorf("active version %d, want none", v)
			}
			// No active subscription: 404 before If-Match is looked at.
			for _, ifMatch := range [][]string{{quoted(e)}, {quoted(other)}, {"*"}, {"W/" + quoted(e)}} {
				resttest.WantError(t, g.cancel(t, id, "", ifMatch, false), http.StatusNotFound, codes.NotFound, "")
			}
		})
	}
}
