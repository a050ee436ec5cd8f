package gateway_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"google.golang.org/grpc/metadata"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/apikey"
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

// allowed returns the answers a route may give: fuzzAllowed, and for
// StreamEvents 406 (a stream asked for as CBOR) and 503 (the harness runs
// no event hub).
func allowed(rt operation) []int {
	if rt.id == "EventService_StreamEvents" {
		return append(slices.Clip(fuzzAllowed), http.StatusNotAcceptable, http.StatusServiceUnavailable)
	}
	return fuzzAllowed
}

// fuzzNoKey, set in the coding byte, sends the request without its API
// key. The codings take the low three bits, so the seeds of before (all
// under 8) are sent with the key, as they were meant.
const fuzzNoKey = 8

// fuzzMaxErrorAnswer bounds the size of an error answer, whatever the body.
const fuzzMaxErrorAnswer = 4 << 10

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
	fuzzRouteCount = 16
)

// FuzzRESTBody sends bodies to every REST route in JSON and CBOR, plain,
// gzip and zstd, with the API key and without (every route but Ping needs
// it), through the gateway's HTTP handler in process (one gateway for every
// input, over a database of its own): the answer is one of fuzzAllowed, an
// error answer is at most fuzzMaxErrorAnswer bytes, nothing panics, and the
// bytes allocated while answering stay under a bound linear in the body's
// length. Without the key, a route that needs it answers 401 without
// reading a byte of the body, and allocates no more for a long body than
// for a short one. `make test` runs the seed corpus
// (testdata/fuzz/FuzzRESTBody); `make fuzz` explores.
func FuzzRESTBody(f *testing.F) {
	g := newTestGateway(f, withKey(f), func(o *gateway.Options) { o.MaxBodyBytes = fuzzMaxBody })
	ctx := f.Context()
	acct, err := g.account.CreateAccount(metadata.AppendToOutgoingContext(ctx, apikey.MetadataKey, testKey),
		&shebav1.CreateAccountRequest{Username: "fuzz", Password: "password1"})
	if err != nil {
		f.Fatal(err)
	}
	id := acct.GetAccount().GetId()
	routes := operations(f)
	if len(routes) != fuzzRouteCount {
		// The corpus numbers routes by their place in this order.
		f.Fatalf("%d routes, want %d: update fuzzRouteCount and the seed corpus", len(routes), fuzzRouteCount)
	}
	serve := func(t *testing.T, rt operation, coding int, keyed bool, body []byte) (rec *httptest.ResponseRecorder, alloc uint64, seen int, read int64) {
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
		if keyed {
			req.Header.Set("X-Api-Key", testKey)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		rec, read = g.serveCounting(req)
		runtime.ReadMemStats(&after)
		return rec, after.TotalAlloc - before.TotalAlloc, seen, read
	}

	// What each route costs with a small valid body.
	valid := map[string]map[string]any{
		"AccountService_CreateAccount":           {"username": "fuzz", "password": "password1"},
		"AccountService_Login":                   {"username": "fuzz", "password": "password1"},
		"SubscriptionService_CreateSubscription": {"plan": "pro"},
	}
	// An unknown field whose name fills the body, which an error once
	// echoed whole.
	bigField := []byte(`{"` + strings.Repeat("a", fuzzMaxBody-16) + `":1}`)
	bigCBORField, err := cbor.Marshal(map[string]int{strings.Repeat("a", fuzzMaxBody-16): 1})
	if err != nil {
		f.Fatal(err)
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
			rec, alloc, _, _ := serve(nil, rt, 0, true, js)
			if !slices.Contains(allowed(rt), rec.Code) {
				f.Fatalf("%s %s with %s: got %d", rt.method, rt.path, js, rec.Code)
			}
			base[i] = max(base[i], alloc)
		}
		f.Logf("%s %s: %d bytes allocated with %s", rt.method, rt.path, base[i], js)
		f.Add(uint8(i), uint8(0), js)
		f.Add(uint8(i), uint8(3), cb)
		// Without the key, and with an unknown field of nearly the
		// limit's length, with and without the key.
		f.Add(uint8(i), uint8(fuzzNoKey), js)
		f.Add(uint8(i), uint8(fuzzNoKey|4), cb)
		f.Add(uint8(i), uint8(1), bigField)
		f.Add(uint8(i), uint8(fuzzNoKey|1), bigField)
		f.Add(uint8(i), uint8(3), bigCBORField)
	}

	f.Fuzz(func(t *testing.T, route, coding uint8, body []byte) {
		i := int(route) % len(routes)
		rt := routes[i]
		c := int(coding) % len(fuzzCodings)
		keyed := coding&fuzzNoKey == 0
		rec, alloc, seen, read := serve(t, rt, c, keyed, body)
		what := fmt.Sprintf("%s %s, %s %s, key %v, %d-byte body", rt.method, rt.path, fuzzCodings[c].contentType, fuzzCodings[c].encoding, keyed, len(body))
		if !slices.Contains(allowed(rt), rec.Code) {
			t.Fatalf("%s %q: got HTTP %d, want one of %v", what, body, rec.Code, allowed(rt))
		}
		if rec.Code >= 400 && rec.Body.Len() > fuzzMaxErrorAnswer {
			t.Fatalf("%s: HTTP %d answer of %d bytes, want at most %d", what, rec.Code, rec.Body.Len(), fuzzMaxErrorAnswer)
		}
		bound := 2*base[i] + allocSlack
		if !keyed && rt.id != "PingService_Ping" {
			if rec.Code != http.StatusUnauthorized || read != 0 {
				t.Fatalf("%s: got HTTP %d with %d bytes of the body read, want 401 with none", what, rec.Code, read)
			}
		} else {
			bound += perBodyByte * uint64(seen)
			if fuzzCodings[c].encoding == "zstd" {
				bound += zstdWindow
			}
		}
		if alloc > bound {
			t.Fatalf("%s (%d as read): allocated %d bytes, over the bound %d", what, seen, alloc, bound)
		}
	})
}
