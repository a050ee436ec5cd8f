package httpcompress_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/shebasvc/sheba/codec/httpcompress"
)

// payload is n bytes of compressible text.
func payload(n int) []byte {
	return bytes.Repeat([]byte("sheba "), n/6+1)[:n]
}

// backend answers /size/N with N bytes, /preencoded with a body it
// compressed itself, /tagged with 4096 bytes under a strong ETag that it
// asks to keep uncompressed, and /echo with what it read of the request
// body.
func backend() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /size/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.PathValue("n"))
		w.Header().Set("Content-Type", "application/json")
		// As the gateway does with runtime.WithWriteContentLength.
		w.Header().Set("Content-Length", strconv.Itoa(n))
		_, _ = w.Write(payload(n))
	})
	mux.HandleFunc("GET /preencoded", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write(gzipped(payload(4096)))
	})
	mux.HandleFunc("GET /tagged", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set(httpcompress.NoCompression, "1")
		_, _ = w.Write(payload(4096))
	})
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		sum := sha256.Sum256(b)
		w.Header().Set("X-Content-Length", strconv.FormatInt(r.ContentLength, 10))
		w.Header().Set("X-Content-Encoding", r.Header.Get("Content-Encoding"))
		_, _ = fmt.Fprintf(w, "%d %s", len(b), hex.EncodeToString(sum[:]))
	})
	return mux
}

type recordedError struct {
	status int
	msg    string
}

// server serves backend through the middleware and records what the error
// writer was asked to write.
func server(t *testing.T, opts ...httpcompress.Option) (*httptest.Server, *[]recordedError) {
	t.Helper()
	var (
		mu   sync.Mutex
		errs []recordedError
	)
	opts = append([]httpcompress.Option{httpcompress.WithErrorWriter(func(w http.ResponseWriter, r *http.Request, status int, msg string) {
		mu.Lock()
		errs = append(errs, recordedError{status, msg})
		mu.Unlock()
		http.Error(w, msg, status)
	})}, opts...)
	h, err := httpcompress.NewHandler(backend(), opts...)
	if err != nil {
		t.Fatalf("NewHandler: %v", err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, &errs
}

// client never asks for or decodes compression by itself.
var client = &http.Client{Transport: &http.Transport{DisableCompression: true}}

func get(t *testing.T, url, acceptEncoding string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if acceptEncoding != "" {
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func decode(t *testing.T, coding string, b []byte) []byte {
	t.Helper()
	switch coding {
	case "":
		return b
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("gzip: %v", err)
		}
		out, err := io.ReadAll(zr)
		if err != nil {
			t.Fatalf("gzip: %v", err)
		}
		return out
	case "zstd":
		zd, err := zstd.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("zstd: %v", err)
		}
		defer zd.Close()
		out, err := io.ReadAll(zd)
		if err != nil {
			t.Fatalf("zstd: %v", err)
		}
		return out
	}
	t.Fatalf("unexpected coding %q", coding)
	return nil
}

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return buf.Bytes()
}

func zstded(b []byte) []byte {
	enc, _ := zstd.NewWriter(nil)
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}

func varies(h http.Header) bool {
	for _, v := range h.Values("Vary") {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), "Accept-Encoding") {
				return true
			}
		}
	}
	return false
}

func TestResponseEncoding(t *testing.T) {
	srv, _ := server(t)
	for _, tc := range []struct {
		accept string
		want   string
	}{
		{"", ""},
		{"gzip", "gzip"},
		{"zstd", "zstd"},
		{"GZIP", "gzip"},
		{"gzip, zstd", "zstd"},             // a tie goes to zstd
		{"gzip;q=0.8, zstd;q=0.8", "zstd"}, // a tie goes to zstd
		{"gzip;q=1.0, zstd;q=0.5", "gzip"},
		{"gzip;q=0.5, zstd;q=0.9", "zstd"},
		{"gzip;q=0", ""},
		{"gzip;q=0, zstd", "zstd"},
		{"zstd;q=0, gzip", "gzip"},
		{"zstd;q=0, gzip;q=0", ""},
		{"*", "zstd"},
		{"*;q=0.5, gzip", "gzip"},
		{"*, zstd;q=0", "gzip"},
		{"*;q=0", ""},
		{"identity", ""},
		{"identity;q=0, gzip", "gzip"},
		{"br", ""},
		{"deflate, br;q=0.9", ""},
	} {
		t.Run(tc.accept, func(t *testing.T) {
			resp, body := get(t, srv.URL+"/size/4096", tc.accept)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status: got %d, want 200", resp.StatusCode)
			}
			if got := resp.Header.Get("Content-Encoding"); got != tc.want {
				t.Fatalf("Content-Encoding: got %q, want %q", got, tc.want)
			}
			if !varies(resp.Header) {
				t.Errorf("Vary: got %q, want Accept-Encoding", resp.Header.Values("Vary"))
			}
			// net/http may set it again, for the compressed bytes.
			if cl := resp.Header.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(body)) {
				t.Errorf("Content-Length %s on a body of %d bytes", cl, len(body))
			}
			if got := decode(t, tc.want, body); !bytes.Equal(got, payload(4096)) {
				t.Errorf("body differs after decoding (%d bytes)", len(got))
			}
		})
	}
}

func TestMinBytes(t *testing.T) {
	srv, _ := server(t, httpcompress.WithMinBytes(1024))
	for _, tc := range []struct {
		size int
		want string
	}{
		{0, ""},
		{1023, ""},
		{1024, "zstd"},
		{1025, "zstd"},
		{200_000, "zstd"},
	} {
		t.Run(strconv.Itoa(tc.size), func(t *testing.T) {
			resp, body := get(t, srv.URL+"/size/"+strconv.Itoa(tc.size), "gzip, zstd")
			if got := resp.Header.Get("Content-Encoding"); got != tc.want {
				t.Fatalf("Content-Encoding: got %q, want %q", got, tc.want)
			}
			if !varies(resp.Header) {
				t.Errorf("Vary: got %q, want Accept-Encoding", resp.Header.Values("Vary"))
			}
			if got := decode(t, tc.want, body); !bytes.Equal(got, payload(tc.size)) {
				t.Errorf("body differs after decoding")
			}
		})
	}
}

// TestNoCompression checks that an answer whose handler sets the
// NoCompression header goes as it is, with its ETag, and without that
// header.
func TestNoCompression(t *testing.T) {
	srv, _ := server(t, httpcompress.WithMinBytes(0))
	resp, body := get(t, srv.URL+"/tagged", "gzip, zstd")
	if got := resp.Header.Get("Content-Encoding"); got != "" {
		t.Errorf("Content-Encoding: got %q, want none", got)
	}
	if got := resp.Header.Get("ETag"); got != `"v1"` {
		t.Errorf("ETag: got %q, want the handler's \"v1\"", got)
	}
	if got := resp.Header.Values(httpcompress.NoCompression); len(got) > 0 {
		t.Errorf("%s sent: %q", httpcompress.NoCompression, got)
	}
	if !bytes.Equal(body, payload(4096)) {
		t.Errorf("body altered")
	}
}

func TestHandlerEncodingKept(t *testing.T) {
	srv, _ := server(t)
	resp, body := get(t, srv.URL+"/preencoded", "zstd, gzip")
	if got := resp.Header.Get("Content-Encoding"); got != "gzip" {
		t.Fatalf("Content-Encoding: got %q, want the handler's gzip", got)
	}
	if got := decode(t, "gzip", body); !bytes.Equal(got, payload(4096)) {
		t.Errorf("body compressed twice or altered")
	}
}

func TestHeadNotCompressed(t *testing.T) {
	srv, _ := server(t)
	req, _ := http.NewRequest(http.MethodHead, srv.URL+"/size/4096", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Content-Encoding"); got != "" {
		t.Errorf("Content-Encoding: got %q on HEAD, want none", got)
	}
}

func post(t *testing.T, url, contentEncoding string, body io.Reader) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if contentEncoding != "" {
		req.Header.Set("Content-Encoding", contentEncoding)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func echoOf(b []byte) string {
	sum := sha256.Sum256(b)
	return fmt.Sprintf("%d %s", len(b), hex.EncodeToString(sum[:]))
}

func TestRequestDecompression(t *testing.T) {
	const limit = 64 << 10
	srv, errs := server(t, httpcompress.WithMaxRequestBytes(limit))
	plain := payload(limit)
	for _, tc := range []struct {
		name     string
		encoding string
		body     []byte
		want     []byte
	}{
		{"gzip", "gzip", gzipped(plain), plain},
		{"zstd", "zstd", zstded(plain), plain},
		{"x-gzip", "x-gzip", gzipped(plain[:100]), plain[:100]},
		{"upper case", "ZSTD", zstded(plain[:100]), plain[:100]},
		{"identity", "identity", plain[:100], plain[:100]},
		{"none", "", plain[:100], plain[:100]},
		{"empty gzip body", "gzip", nil, nil},
		{"gzip of nothing", "gzip", gzipped(nil), nil},
		{"zstd of nothing", "zstd", zstded(nil), nil},
		{"two gzip members", "gzip", append(gzipped(plain[:10]), gzipped(plain[10:20])...), plain[:20]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := post(t, srv.URL+"/echo", tc.encoding, bytes.NewReader(tc.body))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status: got %d (%s), want 200", resp.StatusCode, body)
			}
			if body != echoOf(tc.want) {
				t.Errorf("handler read %q, want %q", body, echoOf(tc.want))
			}
			if tc.encoding != "" && tc.encoding != "identity" {
				if got := resp.Header.Get("X-Content-Encoding"); got != "" {
					t.Errorf("handler saw Content-Encoding %q, want none", got)
				}
				if got, want := resp.Header.Get("X-Content-Length"), strconv.Itoa(len(tc.want)); got != want && len(tc.body) > 0 {
					t.Errorf("handler saw ContentLength %s, want %s", got, want)
				}
			}
		})
	}
	if len(*errs) != 0 {
		t.Errorf("error writer called: %v", *errs)
	}
}

func TestRequestErrors(t *testing.T) {
	const limit = 64 << 10
	plain := payload(limit + 1)
	gz, zs := gzipped(plain[:1000]), zstded(plain[:1000])
	corruptGzip := append([]byte{}, gz...)
	corruptGzip[len(corruptGzip)/2] ^= 0xff
	corruptZstd := append([]byte{}, zs...)
	corruptZstd[len(corruptZstd)/2] ^= 0xff
	for _, tc := range []struct {
		name     string
		encoding string
		body     []byte
		want     int
	}{
		{"exactly the limit, gzip", "gzip", gzipped(plain[:limit]), http.StatusOK},
		{"exactly the limit, zstd", "zstd", zstded(plain[:limit]), http.StatusOK},
		{"one byte over, gzip", "gzip", gzipped(plain), http.StatusRequestEntityTooLarge},
		{"one byte over, zstd", "zstd", zstded(plain), http.StatusRequestEntityTooLarge},
		{"unknown coding", "br", []byte("x"), http.StatusUnsupportedMediaType},
		{"deflate", "deflate", []byte("x"), http.StatusUnsupportedMediaType},
		{"stacked codings", "gzip, zstd", zstded(gz), http.StatusUnsupportedMediaType},
		{"not gzip", "gzip", []byte("plain text, not gzip"), http.StatusBadRequest},
		{"not zstd", "zstd", []byte("plain text, not zstd"), http.StatusBadRequest},
		{"truncated gzip", "gzip", gz[:len(gz)-5], http.StatusBadRequest},
		{"truncated zstd", "zstd", zs[:len(zs)-5], http.StatusBadRequest},
		{"corrupt gzip", "gzip", corruptGzip, http.StatusBadRequest},
		{"corrupt zstd", "zstd", corruptZstd, http.StatusBadRequest},
		{"gzip then garbage", "gzip", append(append([]byte{}, gz...), "junk"...), http.StatusBadRequest},
		{"zstd with gzip body", "zstd", gz, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, errs := server(t, httpcompress.WithMaxRequestBytes(limit))
			resp, body := post(t, srv.URL+"/echo", tc.encoding, bytes.NewReader(tc.body))
			if resp.StatusCode != tc.want {
				t.Fatalf("status: got %d (%s), want %d", resp.StatusCode, body, tc.want)
			}
			if tc.want == http.StatusOK {
				return
			}
			if len(*errs) != 1 || (*errs)[0].status != tc.want {
				t.Errorf("error writer got %v, want one call with %d", *errs, tc.want)
			}
			if tc.want == http.StatusUnsupportedMediaType && resp.Header.Get("Accept-Encoding") != "gzip, zstd" {
				t.Errorf("Accept-Encoding on 415: got %q, want %q", resp.Header.Get("Accept-Encoding"), "gzip, zstd")
			}
		})
	}
}

// TestRawLimitOutside checks that a raw body limit set before the
// middleware (http.MaxBytesReader) is answered 413 too.
func TestRawLimitOutside(t *testing.T) {
	var got recordedError
	h, err := httpcompress.NewHandler(backend(), httpcompress.WithErrorWriter(func(w http.ResponseWriter, _ *http.Request, status int, msg string) {
		got = recordedError{status, msg}
		w.WriteHeader(status)
	}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 100)
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	noise := make([]byte, 5000)
	_, _ = rand.NewChaCha8([32]byte{}).Read(noise)
	resp, _ := post(t, srv.URL+"/echo", "zstd", bytes.NewReader(zstded(noise)))
	if resp.StatusCode != http.StatusRequestEntityTooLarge || got.status != http.StatusRequestEntityTooLarge {
		t.Errorf("got %d (%v), want 413", resp.StatusCode, got)
	}
}

// bomb writes the coding of size zero bytes into a buffer, streaming, so
// the plain bytes never exist; it returns the compressed body.
func bomb(t *testing.T, coding string, size int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	var zw io.WriteCloser
	switch coding {
	case "gzip":
		w, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		if err != nil {
			t.Fatal(err)
		}
		zw = w
	case "zstd":
		w, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedFastest))
		if err != nil {
			t.Fatal(err)
		}
		zw = w
	}
	chunk := make([]byte, 1<<20)
	for written := int64(0); written < size; written += int64(len(chunk)) {
		if _, err := zw.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestDecompressionBomb(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test compresses 2 GiB of zeros to build its bombs; make test and CI run it")
	}
	const gib = 1 << 30
	srv, errs := server(t, httpcompress.WithMaxRequestBytes(1<<20))
	for _, coding := range []string{"gzip", "zstd"} {
		t.Run(coding, func(t *testing.T) {
			body := bomb(t, coding, gib)
			t.Logf("%s bomb: %d bytes expanding to 1 GiB", coding, len(body))

			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			resp, msg := post(t, srv.URL+"/echo", coding, bytes.NewReader(body))
			runtime.ReadMemStats(&after)

			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("status: got %d (%s), want 413", resp.StatusCode, msg)
			}
			t.Logf("allocated %d KiB, heap in use %+d KiB", (after.TotalAlloc-before.TotalAlloc)>>10, (int64(after.HeapInuse)-int64(before.HeapInuse))>>10)
			// TotalAlloc counts every allocation made meanwhile, freed
			// or not, by the server and the client alike.
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
				t.Errorf("allocated %d MiB while rejecting the bomb, want < 64 MiB", grew>>20)
			}
			if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 64<<20 {
				t.Errorf("heap in use grew by %d MiB, want < 64 MiB", grew>>20)
			}
		})
	}
	for _, e := range *errs {
		if e.status != http.StatusRequestEntityTooLarge {
			t.Errorf("error writer got %v, want 413 only", e)
		}
	}
}

// TestZstdWindowLimit checks that a zstd frame asking for a window larger
// than RFC 9659 allows the content coding is refused before any window is
// allocated.
func TestZstdWindowLimit(t *testing.T) {
	frame := []byte{
		0x28, 0xb5, 0x2f, 0xfd, // magic number
		0x00,             // no content size, not single segment, no checksum
		16 << 3,          // window descriptor: 2^(10+16) bytes = 64 MiB
		0x01, 0x00, 0x00, // last block, raw, empty
	}
	srv, errs := server(t, httpcompress.WithMaxRequestBytes(1<<20))
	resp, msg := post(t, srv.URL+"/echo", "zstd", bytes.NewReader(frame))
	if resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status: got %d (%s), want 400 or 413", resp.StatusCode, msg)
	}
	if len(*errs) != 1 {
		t.Errorf("error writer calls: %v", *errs)
	}
}

func TestInvalidOptions(t *testing.T) {
	for _, opt := range []httpcompress.Option{
		httpcompress.WithMinBytes(-1),
		httpcompress.WithMaxRequestBytes(0),
		httpcompress.WithErrorWriter(nil),
		httpcompress.WithMaxZstdWindow(512),
		httpcompress.WithMaxZstdWindow(16 << 20),
	} {
		if _, err := httpcompress.NewHandler(backend(), opt); err == nil {
			t.Error("NewHandler accepted an invalid option")
		}
	}
}

func TestConcurrent(t *testing.T) {
	srv, _ := server(t, httpcompress.WithMaxRequestBytes(1<<20))
	plain := payload(50_000)
	bodies := map[string][]byte{"gzip": gzipped(plain), "zstd": zstded(plain)}
	var wg sync.WaitGroup
	for i := range 16 {
		coding := []string{"gzip", "zstd"}[i%2]
		wg.Go(func() {
			for range 10 {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/echo", bytes.NewReader(bodies[coding]))
				req.Header.Set("Content-Encoding", coding)
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != echoOf(plain) {
					t.Errorf("%s: got %q", coding, b)
					return
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkResponse(b *testing.B) {
	h, err := httpcompress.NewHandler(backend())
	if err != nil {
		b.Fatal(err)
	}
	for _, coding := range []string{"identity", "gzip", "zstd"} {
		b.Run(coding+"/20KiB", func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "/size/20480", nil)
			req.Header.Set("Accept-Encoding", coding)
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(httptest.NewRecorder(), req)
			}
		})
	}
}

// hijackRecorder is a recorder whose connection could be hijacked, as a
// net/http server's HTTP/1 writer.
type hijackRecorder struct{ *httptest.ResponseRecorder }

func (hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, errors.New("no conn")
}

// TestPlainAnswer checks what an answer that goes uncompressed whatever it
// is (a request without Accept-Encoding, a HEAD) gets from the handler:
// Vary: Accept-Encoding after the Vary already set, no NoCompression
// header, a writer that flushes, unwraps and hijacks when the server's
// does, as gzhttp's; and that it costs no allocation.
func TestPlainAnswer(t *testing.T) {
	var sawHijacker, sawFlusher bool
	h, err := httpcompress.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, sawHijacker = w.(http.Hijacker)
		_, sawFlusher = w.(http.Flusher)
		w.Header()["Content-Type"] = []string{"application/json"}
		w.Header()[httpcompress.NoCompression] = []string{"1"}
		if err := http.NewResponseController(w).SetWriteDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
			t.Errorf("SetWriteDeadline: %v", err)
		}
		_, _ = w.Write([]byte("{}"))
	}), httpcompress.WithMinBytes(0))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		method   string
		vary     []string
		hijacker bool
		want     []string
	}{
		{"no Vary", http.MethodGet, nil, false, []string{"Accept-Encoding"}},
		{"Vary Accept", http.MethodGet, []string{"Accept"}, true, []string{"Accept", "Accept-Encoding"}},
		{"Vary Origin, Accept", http.MethodGet, []string{"Origin", "Accept"}, false, []string{"Origin", "Accept", "Accept-Encoding"}},
		{"HEAD", http.MethodHead, []string{"Accept"}, false, []string{"Accept", "Accept-Encoding"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			if tc.vary != nil {
				rec.Header()["Vary"] = slices.Clone(tc.vary)
			}
			var w http.ResponseWriter = rec
			if tc.hijacker {
				w = hijackRecorder{rec}
			}
			h.ServeHTTP(w, httptest.NewRequest(tc.method, "/", nil))
			if got := rec.Result().Header.Values("Vary"); !slices.Equal(got, tc.want) {
				t.Errorf("Vary: got %q, want %q", got, tc.want)
			}
			if got := rec.Result().Header.Values(httpcompress.NoCompression); len(got) > 0 {
				t.Errorf("%s sent: %q", httpcompress.NoCompression, got)
			}
			if got := rec.Body.String(); got != "{}" && tc.method != http.MethodHead {
				t.Errorf("body: got %q, want {}", got)
			}
			if sawHijacker != tc.hijacker || !sawFlusher {
				t.Errorf("the handler's writer: Hijacker %v (want %v), Flusher %v", sawHijacker, tc.hijacker, sawFlusher)
			}
		})
	}
	// The handler adds no allocation to those of the one it wraps, on a
	// writer whose header map has room for what it sets, as a server's.
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("{}")) })
	plain, err := httpcompress.NewHandler(next)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	w := &reusedWriter{header: http.Header{}}
	allocs := func(h http.Handler) float64 {
		return testing.AllocsPerRun(100, func() {
			w.header["Vary"] = varyAccept[:1:1]
			h.ServeHTTP(w, req)
		})
	}
	if n, bare := allocs(plain), allocs(next); n != bare {
		t.Errorf("%v allocations a plain answer, want the wrapped handler's %v", n, bare)
	}
}

var varyAccept = []string{"Accept"}

// reusedWriter is a ResponseWriter whose header map is kept from one
// answer to the next.
type reusedWriter struct{ header http.Header }

func (w *reusedWriter) Header() http.Header         { return w.header }
func (w *reusedWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *reusedWriter) WriteHeader(int)             {}
