package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fxamacker/cbor/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// The fuzz targets run against one real service each (started once per
// target, not per input), over a database of their own. `make test` runs
// their seed corpora (testdata/fuzz/<name>); `make fuzz` explores.

// fuzzPagingSecret is the paging.secret of the fuzzed service.
var fuzzPagingSecret = strings.Repeat("f0", 32)

// FuzzPageToken sends page tokens and plans to ListSubscriptions over both
// transports: the answer is 200 or 400, never anything else, and both
// transports agree.
func FuzzPageToken(f *testing.F) {
	e := newTestEnv(f, withPagingSecret(fuzzPagingSecret))
	ctx := context.Background()
	acct, err := e.account.CreateAccount(ctx, &shebav1.CreateAccountRequest{Username: "fuzz", Password: "password1"})
	if err != nil {
		f.Fatal(err)
	}
	for _, plan := range []string{"pro", "basic", "pro"} {
		if _, err := e.sub.CreateSubscription(ctx, &shebav1.CreateSubscriptionRequest{AccountId: acct.GetAccount().GetId(), Plan: plan}); err != nil {
			f.Fatal(err)
		}
		if _, err := e.sub.CancelSubscription(ctx, &shebav1.CancelSubscriptionRequest{AccountId: acct.GetAccount().GetId()}); err != nil {
			f.Fatal(err)
		}
	}
	// Real tokens of this run, for the fuzzer to alter.
	for _, plan := range []string{"", "pro"} {
		page, err := e.sub.ListSubscriptions(ctx, &shebav1.ListSubscriptionsRequest{PageSize: 1, Plan: plan})
		if err != nil || page.GetNextPageToken() == "" {
			f.Fatalf("list %q: %v, %v", plan, page, err)
		}
		f.Add(page.GetNextPageToken(), plan)
	}
	f.Fuzz(func(t *testing.T, token, plan string) {
		q := url.Values{"page_size": {"1"}, "page_token": {token}, "plan": {plan}}
		r := e.do(t, http.MethodGet, "/v1/subscriptions?"+q.Encode(), "")
		switch r.code {
		case http.StatusOK:
		case http.StatusBadRequest:
			wantDetails(t, "REST 400", status.FromProto(r.status(t)), false, reason.InvalidArgument, r.header.Values("Retry-After"))
		default:
			t.Fatalf("REST token %q plan %q: got HTTP %d, want 200 or 400; body %q", token, plan, r.code, r.body)
		}
		// A proto string must be UTF-8: the gRPC client cannot send
		// anything else.
		if !utf8.ValidString(token) || !utf8.ValidString(plan) {
			return
		}
		_, err := e.sub.ListSubscriptions(t.Context(), &shebav1.ListSubscriptionsRequest{PageSize: 1, PageToken: token, Plan: plan})
		switch code := status.Code(err); {
		case code != codes.OK && code != codes.InvalidArgument:
			t.Fatalf("gRPC token %q plan %q: got %v, want OK or InvalidArgument", token, plan, err)
		case (code == codes.OK) != (r.code == http.StatusOK):
			t.Fatalf("token %q plan %q: gRPC %v but REST %d", token, plan, code, r.code)
		}
	})
}

// The codings FuzzRESTBody sends a body in. The fuzzed bytes are the body
// before compression; the last two send them as they are under a
// compressed coding, to reach the decompressors with any bytes.
var fuzzCodings = []struct {
	contentType, encoding string
	compress              func(*testing.T, []byte) []byte // nil: sent as it is
}{
	{"application/json", "", nil},
	{"application/json", "gzip", gzipBytes},
	{"application/json", "zstd", zstdBytes},
	{"application/cbor", "", nil},
	{"application/cbor", "gzip", gzipBytes},
	{"application/cbor", "zstd", zstdBytes},
	{"application/json", "gzip", nil},
	{"application/cbor", "zstd", nil},
}

// fuzzAllowed are the answers a REST body may get.
var fuzzAllowed = []int{200, 400, 401, 404, 409, 413, 415}

// The allocation bound of one request: what the route costs with a small
// valid body (measured at start, doubled: argon2id's 19 MiB for the
// password routes, some tens of KiB for the rest), the window a zstd body
// may declare (8 MiB, RFC 9659; the decoder allocates about that much
// whatever the body's size), some slack for the other goroutines of the
// process, and perBodyByte for each byte of the body as the server sees
// it. 64 bytes a byte leaves room for the buffers the body passes through
// (read, decompressed, decoded, copied over the in-process channel, each
// growing by doubling) while catching a decoder that builds a tree many
// times the size of its input.
const (
	perBodyByte    = 64
	allocSlack     = 512 << 10
	zstdWindow     = 8 << 20
	fuzzMaxBody    = 64 << 10
	fuzzRouteCount = 13
)

// FuzzRESTBody sends bodies to every REST route in JSON and CBOR, plain,
// gzip and zstd, through the service's HTTP handler in process: the answer
// is one of fuzzAllowed, nothing panics, and the bytes allocated while
// answering stay under a bound linear in the body's length.
func FuzzRESTBody(f *testing.F) {
	e := newTestEnv(f, func(c *config.Config) { c.HTTP.MaxBodyBytes = fuzzMaxBody })
	ctx := context.Background()
	acct, err := e.account.CreateAccount(ctx, &shebav1.CreateAccountRequest{Username: "fuzz", Password: "password1"})
	if err != nil {
		f.Fatal(err)
	}
	id := acct.GetAccount().GetId()
	routes := restRoutes(f, apiMethods(f))
	slices.SortFunc(routes, func(a, b restRoute) int { return strings.Compare(a.method+a.path, b.method+b.path) })
	if len(routes) != fuzzRouteCount {
		// The corpus numbers routes by their place in this order.
		f.Fatalf("%d routes, want %d: update fuzzRouteCount and the seed corpus", len(routes), fuzzRouteCount)
	}
	handler := e.server.Handler()
	serve := func(t *testing.T, rt restRoute, coding int, body []byte) (code int, alloc uint64, seen int) {
		c := fuzzCodings[coding]
		wire, seen := body, len(body)
		switch {
		case c.compress != nil:
			wire = c.compress(t, body)
		case c.encoding != "":
			// Whatever it decompresses to, the server reads at most this.
			seen = fuzzMaxBody
		}
		path := strings.ReplaceAll(strings.ReplaceAll(rt.path, "{accountId}", id), "{account_id}", id)
		req := httptest.NewRequestWithContext(ctx, rt.method, path, bytes.NewReader(wire))
		req.Header.Set("Content-Type", c.contentType)
		req.Header.Set("Accept", c.contentType)
		if c.encoding != "" {
			req.Header.Set("Content-Encoding", c.encoding)
		}
		req.Header.Set("X-Api-Key", testKey)
		rec := httptest.NewRecorder()
		// The log of the service grows by doubling: had it kept every
		// line, a request would now and then pay for copying all of it.
		e.logs.Reset()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		handler.ServeHTTP(rec, req)
		runtime.ReadMemStats(&after)
		return rec.Code, after.TotalAlloc - before.TotalAlloc, seen
	}

	// What each route costs with a small valid body.
	valid := map[string]map[string]any{
		"/sheba.v1.AccountService/CreateAccount":           {"username": "fuzz", "password": "password1"},
		"/sheba.v1.AccountService/Login":                   {"username": "fuzz", "password": "password1"},
		"/sheba.v1.SubscriptionService/CreateSubscription": {"plan": "pro"},
	}
	base := make([]uint64, len(routes))
	for i, rt := range routes {
		doc := valid[rt.grpcMethod]
		if doc == nil {
			doc = map[string]any{}
		}
		js, _ := json.Marshal(doc)
		cb, _ := cbor.Marshal(doc)
		for range 3 {
			code, alloc, _ := serve(nil, rt, 0, js)
			if !slices.Contains(fuzzAllowed, code) {
				f.Fatalf("%s %s with %s: got %d", rt.method, rt.path, js, code)
			}
			base[i] = max(base[i], alloc)
		}
		f.Logf("%s %s: %d bytes allocated with %s", rt.method, rt.path, base[i], js)
		f.Add(uint8(i), uint8(0), js)
		f.Add(uint8(i), uint8(3), cb)
	}

	f.Fuzz(func(t *testing.T, route, coding uint8, body []byte) {
		i := int(route) % len(routes)
		rt := routes[i]
		c := int(coding) % len(fuzzCodings)
		code, alloc, seen := serve(t, rt, c, body)
		if !slices.Contains(fuzzAllowed, code) {
			t.Fatalf("%s %s, %s %s, body %q: got HTTP %d, want one of %v", rt.method, rt.path, fuzzCodings[c].contentType, fuzzCodings[c].encoding, body, code, fuzzAllowed)
		}
		bound := 2*base[i] + allocSlack + perBodyByte*uint64(seen)
		if fuzzCodings[c].encoding == "zstd" {
			bound += zstdWindow
		}
		if alloc > bound {
			t.Fatalf("%s %s, %s %s, %d-byte body (%d as read): allocated %d bytes, over the bound %d", rt.method, rt.path, fuzzCodings[c].contentType, fuzzCodings[c].encoding, len(body), seen, alloc, bound)
		}
	})
}
