package gateway_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc/codes"

	"github.com/shebasvc/sheba/server/gateway"
)

// Compression on REST (docs/api.md): answers in gzip or zstd as accepted,
// request bodies decompressed within http.max_body_bytes.

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

// TestRESTCompression: large answers come back in gzip or zstd as asked,
// small ones and the operator endpoints' do not; compressed request bodies
// are read, and broken ones refused without a 500.
func TestRESTCompression(t *testing.T) {
	t.Parallel()
	g := newTestGateway(t)
	// Enough rows for a list answer over compression.min_bytes.
	if _, err := g.pool.Exec(t.Context(), `
		WITH a AS (INSERT INTO accounts (username, password_hash) VALUES ('heidi', 'no-login') RETURNING id)
		INSERT INTO subscriptions (account_id, plan, status, cancel_time)
		SELECT a.id, 'plan-' || i, 'canceled', now() FROM a, generate_series(1, 20) AS i`); err != nil {
		t.Fatal(err)
	}

	// Accept-Encoding set by hand turns off the transport's own gzip.
	plain := g.do(t, http.MethodGet, "/v1/subscriptions", "", "Accept-Encoding", "identity")
	wantCode(t, plain, http.StatusOK)
	if ce := plain.Header.Get("Content-Encoding"); ce != "" {
		t.Fatalf("identity asked, got Content-Encoding %q", ce)
	}
	if len(plain.Body) < 1024 {
		t.Fatalf("list answer is %d bytes, want at least compression.min_bytes (1024)", len(plain.Body))
	}
	want := jsonValue(t, plain.Body)

	t.Run("responses", func(t *testing.T) {
		for _, test := range []struct {
			accept, want string
		}{
			{"gzip", "gzip"},
			{"zstd", "zstd"},
			{"gzip;q=0.5, zstd;q=0.1", "gzip"},
			{"zstd;q=1, gzip;q=0.2", "zstd"},
		} {
			r := g.do(t, http.MethodGet, "/v1/subscriptions", "", "Accept-Encoding", test.accept)
			wantCode(t, r, http.StatusOK)
			if got := r.Header.Get("Content-Encoding"); got != test.want {
				t.Errorf("Accept-Encoding %q: got Content-Encoding %q, want %q", test.accept, got, test.want)
				continue
			}
			if !strings.Contains(strings.ToLower(strings.Join(r.Header.Values("Vary"), ",")), "accept-encoding") {
				t.Errorf("Accept-Encoding %q: Vary %q lacks Accept-Encoding", test.accept, r.Header.Values("Vary"))
			}
			if len(r.Body) >= len(plain.Body) {
				t.Errorf("Accept-Encoding %q: %d bytes compressed, %d plain", test.accept, len(r.Body), len(plain.Body))
			}
			got := decompress(t, test.want, r.Body)
			if diff := cmp.Diff(want, jsonValue(t, got)); diff != "" {
				t.Errorf("Accept-Encoding %q: decompressed answer differs (-plain +decompressed):\n%s", test.accept, diff)
			}
		}
	})

	t.Run("small and operator answers", func(t *testing.T) {
		for _, path := range []string{"/v1/ping", "/readyz", "/livez"} {
			r := g.do(t, http.MethodGet, path, "", "Accept-Encoding", "gzip, zstd")
			if r.Code/100 != 2 {
				t.Errorf("GET %s: got %d", path, r.Code)
			}
			if ce := r.Header.Get("Content-Encoding"); ce != "" {
				t.Errorf("GET %s: got Content-Encoding %q, want none", path, ce)
			}
		}
		r := g.do(t, http.MethodGet, "/v1/ping", "", "Accept-Encoding", "gzip, zstd")
		if diff := cmp.Diff(map[string]any{"message": "pong"}, jsonValue(t, r.Body)); diff != "" {
			t.Errorf("GET /v1/ping (-want +got):\n%s", diff)
		}
	})

	t.Run("request bodies", func(t *testing.T) {
		for coding, encode := range map[string]func(*testing.T, []byte) []byte{"gzip": gzipBytes, "zstd": zstdBytes} {
			name := "user-" + coding
			body := encode(t, []byte(`{"username":"`+name+`","password":"password1"}`))
			r := g.do(t, http.MethodPost, "/v1/accounts", string(body), "Content-Encoding", coding)
			wantCode(t, r, http.StatusOK)
			if got, _ := jsonValue(t, r.Body).(map[string]any); got["username"] != name {
				t.Errorf("%s body: got %v, want username %s", coding, got, name)
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
			r := g.do(t, http.MethodPost, "/v1/accounts", string(test.body), "Content-Encoding", test.coding)
			if r.Code != test.httpCode {
				t.Errorf("%s: got HTTP %d, want %d; body %s", test.name, r.Code, test.httpCode, r.Body)
				continue
			}
			if st := r.Status(t); codes.Code(st.GetCode()) != test.code {
				t.Errorf("%s: got status code %v, want %v", test.name, codes.Code(st.GetCode()), test.code)
			}
		}
		if n := g.count(t, `SELECT count(*) FROM accounts WHERE username = 'mallory'`); n != 0 {
			t.Errorf("got %d accounts from bad bodies, want 0", n)
		}
	})
}

// TestRESTCompressionMinBytes compresses the same answer under a threshold
// one byte above its size and one at its size.
func TestRESTCompressionMinBytes(t *testing.T) {
	t.Parallel()
	size := len(newTestGateway(t).do(t, http.MethodGet, "/v1/ping", "", "Accept-Encoding", "identity").Body)
	for _, test := range []struct {
		minBytes   int
		compressed bool
	}{
		{size + 1, false},
		{size, true},
	} {
		t.Run(fmt.Sprint(test.minBytes), func(t *testing.T) {
			t.Parallel()
			g := newTestGateway(t, func(o *gateway.Options) { o.CompressMinBytes = test.minBytes })
			for _, coding := range []string{"gzip", "zstd"} {
				r := g.do(t, http.MethodGet, "/v1/ping", "", "Accept-Encoding", coding)
				wantCode(t, r, http.StatusOK)
				got := r.Header.Get("Content-Encoding")
				if test.compressed != (got == coding) || (!test.compressed && got != "") {
					t.Errorf("%d-byte answer at min_bytes %d, %s accepted: Content-Encoding %q", size, test.minBytes, coding, got)
					continue
				}
				body := r.Body
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
	g := newTestGateway(t)
	// Concatenated frames decode as one stream: 1024 frames of 1 MiB zeros.
	frame := zstdBytes(t, make([]byte, 1<<20))
	bomb := bytes.Repeat(frame, 1024)
	t.Logf("bomb: %d bytes expanding to 1 GiB", len(bomb))

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	r := g.do(t, http.MethodPost, "/v1/accounts", string(bomb), "Content-Encoding", "zstd")
	took := time.Since(start)
	runtime.ReadMemStats(&after)

	st := wantError(t, r, http.StatusRequestEntityTooLarge, codes.ResourceExhausted)
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
