package httpcompress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzhttp"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// ErrorWriter writes the answer to a request body that cannot be used:
// httpStatus is 400, 413 or 415 and msg says why in a sentence fit for the
// client.
type ErrorWriter func(w http.ResponseWriter, r *http.Request, httpStatus int, msg string)

// NoCompression is the response header by which the next handler asks
// that its answer go uncompressed whatever its size (an answer whose strong
// ETag names its bytes, say): any value will do, and it is not sent. It is
// gzhttp's own (gzhttp.HeaderNoCompression).
const NoCompression = gzhttp.HeaderNoCompression

// Option configures NewHandler.
type Option func(*options)

type options struct {
	minBytes        int
	maxRequestBytes int64
	maxZstdWindow   uint64
	writeError      ErrorWriter
}

func defaultOptions() options {
	return options{
		minBytes:        1024,
		maxRequestBytes: 1 << 20,
		maxZstdWindow:   maxZstdWindow,
		writeError: func(w http.ResponseWriter, _ *http.Request, httpStatus int, msg string) {
			http.Error(w, msg, httpStatus)
		},
	}
}

// WithMinBytes sets the size from which a response is compressed
// (compression.min_bytes; default 1024). A response shorter than n bytes
// goes as it is.
func WithMinBytes(n int) Option {
	return func(o *options) { o.minBytes = n }
}

// WithMaxRequestBytes sets how many bytes a request body may have once
// decompressed (http.max_body_bytes; default 1 MiB).
func WithMaxRequestBytes(n int64) Option {
	return func(o *options) { o.maxRequestBytes = n }
}

// WithMaxZstdWindow sets the largest window a zstd request body may
// declare (default and most 8 MiB, as RFC 9659 sets for the zstd content
// coding; at least 1 KiB). A decoder allocates about its frame's window, so
// this bounds the memory each zstd request holds while it is read; a body
// that asks for more is answered 400. Streaming encoders often declare 8 MiB
// (klauspost's zstd.NewWriter does for any body over one block), so a
// smaller limit rejects some valid clients.
func WithMaxZstdWindow(n uint64) Option {
	return func(o *options) { o.maxZstdWindow = n }
}

// WithErrorWriter sets how a request body error is written; the default is
// http.Error, plain text.
func WithErrorWriter(fn ErrorWriter) Option {
	return func(o *options) { o.writeError = fn }
}

// maxZstdWindow is the largest zstd window a request may use: RFC 9659
// limits the zstd content coding to 8 MiB windows.
const maxZstdWindow = 8 << 20

// NewHandler wraps next: request bodies in gzip or zstd reach next
// decompressed, and responses are compressed as the client accepts. It
// returns an error only for invalid options.
func NewHandler(next http.Handler, opts ...Option) (http.Handler, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if o.minBytes < 0 {
		return nil, fmt.Errorf("httpcompress: min bytes %d is negative", o.minBytes)
	}
	if o.maxRequestBytes <= 0 {
		return nil, fmt.Errorf("httpcompress: max request bytes %d is not positive", o.maxRequestBytes)
	}
	if o.writeError == nil {
		return nil, errors.New("httpcompress: nil error writer")
	}
	if o.maxZstdWindow < zstd.MinWindowSize || o.maxZstdWindow > maxZstdWindow {
		return nil, fmt.Errorf("httpcompress: max zstd window %d outside [%d, %d]", o.maxZstdWindow, zstd.MinWindowSize, maxZstdWindow)
	}
	wrap, err := gzhttp.NewWrapper(
		gzhttp.MinSize(o.minBytes),
		// RFC 9110 §12.5.3: "*" matches any coding not listed.
		gzhttp.AcceptWildcards(true),
	)
	if err != nil {
		return nil, fmt.Errorf("httpcompress: %w", err)
	}
	d := &decompressor{
		max:        o.maxRequestBytes,
		writeError: o.writeError,
		next:       next,
	}
	d.gzipPool.New = func() any { return new(gzip.Reader) }
	zstdOpts := []zstd.DOption{
		// Concurrency 1 decodes in the caller's goroutine, so a pooled
		// decoder holds no goroutine and needs no Close.
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(o.maxZstdWindow),
		// For a stream this too bounds the window.
		zstd.WithDecoderMaxMemory(o.maxZstdWindow),
	}
	first, err := zstd.NewReader(nil, zstdOpts...)
	if err != nil {
		return nil, fmt.Errorf("httpcompress: %w", err)
	}
	d.zstdPool.New = func() any {
		// The options were checked by the first NewReader.
		zd, _ := zstd.NewReader(nil, zstdOpts...)
		return zd
	}
	d.zstdPool.Put(first)
	return plainUnlessAccepted(wrap(d), d), nil
}

// plainUnlessAccepted returns compress, but for a request whose answer
// gzhttp would not compress whatever it is (a HEAD, or one without
// Accept-Encoding: the requests of most API clients), which goes to next
// as gzhttp would send it: with Vary: Accept-Encoding after the Vary that
// is set, the NoCompression header dropped, and next's writer wrapped.
// gzhttp makes the wrapper, and the Vary value, anew for every request; a
// wrapper here is pooled (as gzhttp pools its compressing ones) and a Vary
// of Accept (the gateway's) shared, so such a request costs no allocation
// here.
func plainUnlessAccepted(compress http.Handler, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodHead && r.Header.Get("Accept-Encoding") != "" {
			compress.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		switch vary := h["Vary"]; {
		case len(vary) == 0:
			h["Vary"] = varyEncoding[:1:1]
		case len(vary) == 1 && vary[0] == "Accept":
			h["Vary"] = varyAcceptEncoding[:2:2]
		default:
			h.Add("Vary", "Accept-Encoding")
		}
		pw := plainWriters.Get().(*plainWriter)
		*pw = plainWriter{ResponseWriter: w}
		if _, ok := w.(http.Hijacker); ok {
			next.ServeHTTP(plainHijacker{pw}, r)
		} else {
			next.ServeHTTP(pw, r)
		}
		h.Del(NoCompression)
		pw.ResponseWriter = nil
		plainWriters.Put(pw)
	})
}

// The Vary values that plainUnlessAccepted shares: their capacity is their
// length, so that an append to one copies it, and nothing changes them in
// place.
var (
	varyEncoding       = []string{"Accept-Encoding"}
	varyAcceptEncoding = []string{"Accept", "Accept-Encoding"}
)

var plainWriters = sync.Pool{New: func() any { return new(plainWriter) }}

// plainWriter is the writer of an answer sent as it is: it drops the
// NoCompression header before the answer's header goes out, as gzhttp's
// NoGzipResponseWriter does, whose methods it has.
type plainWriter struct {
	http.ResponseWriter
	cleaned bool
}

func (p *plainWriter) clean() {
	if !p.cleaned {
		p.ResponseWriter.Header().Del(NoCompression)
		p.cleaned = true
	}
}

func (p *plainWriter) Write(b []byte) (int, error) {
	p.clean()
	return p.ResponseWriter.Write(b)
}

func (p *plainWriter) WriteHeader(code int) {
	p.clean()
	p.ResponseWriter.WriteHeader(code)
}

func (p *plainWriter) Flush() { _ = p.FlushError() }

// FlushError is Flush, with the error of the writer's Flush.
func (p *plainWriter) FlushError() error {
	p.clean()
	return http.NewResponseController(p.ResponseWriter).Flush()
}

// Unwrap returns the writer, for http.ResponseController.
func (p *plainWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }

// plainHijacker is a plainWriter whose writer can be hijacked. It holds a
// pointer alone, so it is an interface value without an allocation.
type plainHijacker struct{ *plainWriter }

func (p plainHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return p.ResponseWriter.(http.Hijacker).Hijack()
}

// decompressor replaces a compressed request body by its decompressed
// bytes before calling next.
type decompressor struct {
	max        int64
	writeError ErrorWriter
	next       http.Handler
	gzipPool   sync.Pool // *gzip.Reader
	zstdPool   sync.Pool // *zstd.Decoder
}

func (d *decompressor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	coding, ok := contentCoding(r.Header)
	if !ok {
		w.Header().Set("Accept-Encoding", "gzip, zstd")
		d.writeError(w, r, http.StatusUnsupportedMediaType,
			fmt.Sprintf("unsupported Content-Encoding %q: send gzip, zstd or no encoding", strings.Join(r.Header.Values("Content-Encoding"), ", ")))
		return
	}
	if coding == "" || r.Body == nil || r.Body == http.NoBody {
		if coding != "" {
			r.Header.Del("Content-Encoding")
		}
		d.next.ServeHTTP(w, r)
		return
	}
	body, status, err := d.decode(coding, r.Body)
	if err != nil {
		d.writeError(w, r, status, err.Error())
		return
	}
	_ = r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	r.Header.Del("Content-Encoding")
	d.next.ServeHTTP(w, r)
}

// contentCoding returns the coding of a request body: "" for none or
// identity, "gzip" or "zstd"; ok is false for anything else, several
// codings included.
func contentCoding(h http.Header) (coding string, ok bool) {
	for _, v := range h.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			switch c = strings.ToLower(strings.TrimSpace(c)); c {
			case "", "identity":
				continue
			case "x-gzip":
				c = "gzip"
			}
			if coding != "" || (c != "gzip" && c != "zstd") {
				return "", false
			}
			coding = c
		}
	}
	return coding, true
}

// decode reads the decompressed body, at most d.max bytes of it. On error
// it returns the HTTP status to answer.
func (d *decompressor) decode(coding string, raw io.Reader) ([]byte, int, error) {
	var (
		src     io.Reader
		release func()
	)
	switch coding {
	case "gzip":
		zr := d.gzipPool.Get().(*gzip.Reader)
		release = func() { d.gzipPool.Put(zr) }
		if err := zr.Reset(raw); err != nil {
			release()
			if errors.Is(err, io.EOF) {
				// An empty body: nothing was compressed.
				return nil, 0, nil
			}
			return nil, bodyStatus(err), bodyError(coding, err)
		}
		src = zr
	case "zstd":
		zd := d.zstdPool.Get().(*zstd.Decoder)
		if err := zd.Reset(raw); err != nil {
			d.zstdPool.Put(zd)
			return nil, bodyStatus(err), bodyError(coding, err)
		}
		src = zd
		release = func() {
			// Drop the reference to the body before pooling.
			_ = zd.Reset(nil)
			d.zstdPool.Put(zd)
		}
	}
	defer release()

	var buf bytes.Buffer
	// One byte past the limit tells a body of exactly the limit from a
	// longer one; nothing past that is ever decompressed.
	n, err := buf.ReadFrom(io.LimitReader(src, d.max+1))
	if err != nil {
		return nil, bodyStatus(err), bodyError(coding, err)
	}
	if n > d.max {
		return nil, http.StatusRequestEntityTooLarge,
			fmt.Errorf("request body larger than %d bytes after decompression", d.max)
	}
	return buf.Bytes(), 0, nil
}

func bodyStatus(err error) int {
	var tooLarge *http.MaxBytesError
	// A zstd frame that declares more content than the decoder may hold.
	if errors.As(err, &tooLarge) || errors.Is(err, zstd.ErrDecoderSizeExceeded) {
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusBadRequest
}

func bodyError(coding string, err error) error {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return fmt.Errorf("request body larger than %d bytes", tooLarge.Limit)
	}
	return fmt.Errorf("invalid %s request body: %v", coding, err)
}
