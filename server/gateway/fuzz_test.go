package gateway_test

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/server/gateway"
)

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
// gzip and zstd, through the gateway's HTTP handler in process (one
// gateway for every input, over a database of its own): the answer is one
// of fuzzAllowed, nothing panics, and the bytes allocated while answering
// stay under a bound linear in the body's length. `make test` runs the seed
// corpus (testdata/fuzz/FuzzRESTBody); `make fuzz` explores.
func FuzzRESTBody(f *testing.F) {
	g := newTestGateway(f, func(o *gateway.Options) { o.MaxBodyBytes = fuzzMaxBody })
	ctx := f.Context()
	acct, err := g.account.CreateAccount(ctx, &shebav1.CreateAccountRequest{Username: "fuzz", Password: "password1"})
	if err != nil {
		f.Fatal(err)
	}
	id := acct.GetAccount().GetId()
	routes := operations(f)
	if len(routes) != fuzzRouteCount {
		// The corpus numbers routes by their place in this order.
		f.Fatalf("%d routes, want %d: update fuzzRouteCount and the seed corpus", len(routes), fuzzRouteCount)
	}
	serve := func(t *testing.T, rt operation, coding int, body []byte) (code int, alloc uint64, seen int) {
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
		rec := httptest.NewRecorder()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		g.handler.ServeHTTP(rec, req)
		runtime.ReadMemStats(&after)
		return rec.Code, after.TotalAlloc - before.TotalAlloc, seen
	}

	// What each route costs with a small valid body.
	valid := map[string]map[string]any{
		"AccountService_CreateAccount":           {"username": "fuzz", "password": "password1"},
		"AccountService_Login":                   {"username": "fuzz", "password": "password1"},
		"SubscriptionService_CreateSubscription": {"plan": "pro"},
	}
	base := make([]uint64, len(routes))
	for i, rt := range routes {
		doc := valid[rt.id]
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
