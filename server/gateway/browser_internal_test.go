package gateway

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/interceptors/apikey"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// The parts of browser.go beneath ServeHTTP, which browser_test.go tests
// over HTTP.

func TestProtocolOf(t *testing.T) {
	for ct, want := range map[string]*browserProtocol{
		"application/proto":                     connectProto,
		"Application/JSON":                      connectJSON,
		"application/json; charset=utf-8":       connectJSON,
		"application/grpc-web":                  grpcWeb,
		"application/grpc-web+proto":            grpcWeb,
		" application/grpc-web ; x":             grpcWeb,
		"application/grpc-web-text":             grpcWebText,
		"application/grpc-web-text+proto; x=1":  grpcWebText,
		"application/grpc":                      nil,
		"application/grpc-web+json":             nil,
		"application/connect+proto":             connectStreamProto,
		"Application/Connect+JSON; x":           connectStreamJSON,
		"application/connect+cbor":              nil,
		"text/plain":                            nil,
		"":                                      nil,
		"application/proto-but-not-quite/proto": nil,
	} {
		if got := protocolOf(ct); got != want {
			t.Errorf("protocolOf(%q) = %+v, want %+v", ct, got, want)
		}
	}
}

// TestTextLen: the base64 of n bytes fits, with line breaks every 76
// characters (MIME's), and the bound is near the exact length.
func TestTextLen(t *testing.T) {
	for _, n := range []int64{0, 1, 2, 3, 69, 70, 1 << 20} {
		exact := int64(base64.StdEncoding.EncodedLen(int(n)))
		wrapped := exact + 2*(exact/76)
		if got := textLen(n); got < wrapped || got > exact+exact/16+2 {
			t.Errorf("textLen(%d) = %d, want from %d to %d", n, got, wrapped, exact+exact/16+2)
		}
	}
}

// TestBodyBounds: at the most MaxBodyBytes may be (64 MiB), the bounds of
// every protocol's body are exact (the message and its frame, and the
// base64 of those for gRPC-Web text), and vanguard's buffer is the bound
// itself; above it New refuses, where MaxBodyBytes near MaxInt64 used to
// overflow the sums (a negative bound refused every body).
func TestBodyBounds(t *testing.T) {
	for _, p := range []*browserProtocol{connectProto, connectJSON, grpcWeb, grpcWebText} {
		limit, sent := p.bounds(maxBodyLimit)
		if limit != maxBodyLimit+p.frame {
			t.Errorf("%s: limit %d, want %d", p.contentType, limit, maxBodyLimit+p.frame)
		}
		want := limit
		if p.text {
			// 4 characters for each 3 bytes, rounded up, and room for
			// line breaks.
			want = (limit+2)/3*4 + (limit+2)/3*4/32 + 2
		}
		if sent != want {
			t.Errorf("%s: sent %d, want %d", p.contentType, sent, want)
		}
	}
	if got := bufferBytes(maxBodyLimit); got != maxBodyLimit {
		t.Errorf("vanguard's buffer at the bound: %d, want %d", got, maxBodyLimit)
	}
	authn := apikey.New(nil, nil)
	for _, n := range []int64{0, -1, maxBodyLimit + 1, math.MaxInt64 - 4, math.MaxInt64} {
		if _, err := New(t.Context(), nil, Options{Authenticator: authn, MaxBodyBytes: n}); err == nil || !strings.Contains(err.Error(), "MaxBodyBytes") {
			t.Errorf("New with MaxBodyBytes %d: got %v, want it refused", n, err)
		}
	}
}

// TestTextWriter: the answer, written in pieces, is one base64 string of
// it, of the text type, without the binary answer's length.
func TestTextWriter(t *testing.T) {
	rec := httptest.NewRecorder()
	rec.Header().Set("Content-Type", grpcWebType)
	rec.Header().Set("Content-Length", "7")
	w := &textWriter{ResponseWriter: rec}
	for _, piece := range []string{"\x00\x00\x00", "\x00\x01x", "\x80\x00\x00\x00\x0egrpc-status:0\r\n"} {
		if _, err := w.Write([]byte(piece)); err != nil {
			t.Fatal(err)
		}
		w.Flush()
	}
	w.close()
	want := base64.StdEncoding.EncodeToString([]byte("\x00\x00\x00\x00\x01x\x80\x00\x00\x00\x0egrpc-status:0\r\n"))
	if got := rec.Body.String(); got != want {
		t.Errorf("body %q, want %q", got, want)
	}
	if got := rec.Header().Get("Content-Type"); got != grpcWebTextType {
		t.Errorf("Content-Type %q, want %q", got, grpcWebTextType)
	}
	if got := rec.Header().Get("Content-Length"); got != "" {
		t.Errorf("Content-Length %q, want none", got)
	}
	if rec.Code != http.StatusOK {
		t.Errorf("status %d", rec.Code)
	}

	// An answer without a body (an error, all in its headers) writes
	// none, closed or not.
	rec = httptest.NewRecorder()
	w = &textWriter{ResponseWriter: rec}
	w.WriteHeader(http.StatusOK)
	w.close()
	if rec.Body.Len() != 0 || rec.Header().Get("Content-Type") != grpcWebTextType {
		t.Errorf("empty answer: body %q, Content-Type %q", rec.Body, rec.Header().Get("Content-Type"))
	}
}

// TestGunzip: boundedGzip gives up to its limit and no more, and what is
// not gzip is MALFORMED_BODY; vanguard's form answers alike, in
// connect-go's errors, a new one each time.
func TestGunzip(t *testing.T) {
	zip := func(s string) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write([]byte(s))
		_ = zw.Close()
		return buf.Bytes()
	}
	for _, test := range []struct {
		name string
		data []byte
		want string
		why  string
	}{
		{"within", zip("abc"), "abc", ""},
		{"at the limit", zip(strings.Repeat("a", 10)), strings.Repeat("a", 10), ""},
		{"over", zip(strings.Repeat("a", 11)), "", reason.BodyTooLarge},
		{"far over", zip(strings.Repeat("a", 1<<20)), "", reason.BodyTooLarge},
		{"not gzip", []byte("abc"), "", reason.MalformedBody},
		{"truncated", zip("abcdef")[:15], "", reason.MalformedBody},
	} {
		t.Run(test.name, func(t *testing.T) {
			got, err := gunzip(test.data, 10)
			if test.why == "" {
				if err != nil || string(got) != test.want {
					t.Errorf("got %q, %v; want %q", got, err, test.want)
				}
				return
			}
			if got := reason.Of(status.Convert(err)); got != test.why {
				t.Errorf("reason %q (%v), want %q", got, err, test.why)
			}
		})
	}
	d := &vanguardGzip{boundedGzip: boundedGzip{limit: 10}}
	first, second := d.Reset(bytes.NewReader([]byte("abc"))), d.Reset(bytes.NewReader([]byte("abc")))
	if first == nil || first == second {
		t.Errorf("vanguardGzip.Reset: %v and %v, want two errors", first, second)
	}
}

func TestBadTimeout(t *testing.T) {
	for _, test := range []struct {
		p     *browserProtocol
		value string
		ok    bool
	}{
		{connectJSON, "", true},
		{connectJSON, "0", true},
		{connectProto, "1500", true},
		{connectJSON, "-1", false},
		{connectJSON, "1.5", false},
		{connectJSON, "soon", false},
		{grpcWeb, "", true},
		{grpcWeb, "10S", true},
		{grpcWebText, "99999999n", true},
		{grpcWeb, "100000000n", false},
		{grpcWeb, "10", false},
		{grpcWeb, "S", false},
		{grpcWeb, "10s", false},
		{grpcWeb, "-1S", false},
	} {
		h := http.Header{}
		if test.value != "" {
			h.Set("Connect-Timeout-Ms", test.value)
			h.Set("Grpc-Timeout", test.value)
		}
		err := badTimeout(h, test.p)
		if (err == nil) != test.ok {
			t.Errorf("%s %q: %v, want ok %v", test.p.name, test.value, err, test.ok)
		}
		if err != nil && status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s %q: %v, want INVALID_ARGUMENT", test.p.name, test.value, err)
		}
	}
}
