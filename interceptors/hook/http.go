package hook

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"go.opentelemetry.io/otel/propagation"
	"golang.org/x/net/http/httpguts"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
)

const (
	// httpMaxAnswerBytes bounds the answer body read, so that a hook cannot
	// make sheba hold unbounded memory.
	httpMaxAnswerBytes = 1 << 20
	// httpMaxAnswerHeaderBytes bounds the answer's headers for the same
	// reason.
	httpMaxAnswerHeaderBytes = 64 << 10
	// httpMaxDrainBytes is what is read of a failed answer to keep its
	// connection: a longer one costs a new connection, not the memory.
	httpMaxDrainBytes = 64 << 10
	// httpDialTimeout bounds a dial even when the call's ctx allows more:
	// a hook is a local service, and one that does not accept within it is
	// down.
	httpDialTimeout = 5 * time.Second
	// httpMaxIdleConns keeps a connection per concurrent call, so that a
	// burst does not end in connections closed and dialed again.
	httpMaxIdleConns = 1024
	// httpMaxScratchBytes is the largest buffer kept for reuse: the one of
	// a rare large call goes to the garbage collector.
	httpMaxScratchBytes = 64 << 10
)

// httpContentType is the Content-Type of every request, set without
// Header.Set's canonicalization and allocation. Never modified.
var httpContentType = []string{"application/json"}

// HTTPOptions configures an HTTPClient. The zero value is ready to use.
type HTTPOptions struct {
	// TLSConfig is used for an https URL; nil verifies the hook against
	// the system roots.
	TLSConfig *tls.Config
	// Propagator, when set, injects the call's trace context into the
	// request headers (W3C traceparent with propagation.TraceContext), so
	// the hook's spans join the call's trace.
	Propagator propagation.TextMapPropagator
}

// HTTPClient asks a hook over the http protocol: a JSON POST per call, on
// connections kept alive and reused. It is safe for concurrent use.
type HTTPClient struct {
	// h1 asks an http:// or unix:// hook; transport the others (h2c://,
	// https://), with url, parsed once and shared by every request,
	// unchanged.
	h1        *h1Client
	url       *url.URL
	transport *http.Transport
	prop      propagation.TextMapPropagator
}

var _ Client = (*HTTPClient)(nil)

// NewHTTPClient returns the client of the hook at rawURL:
// http://host:port/path, https://host:port/path, h2c://host:port/path
// (HTTP/2 with prior knowledge over cleartext) or unix:///abs/path.sock
// (HTTP/1.1 over a unix socket, POST /, Host localhost).
func NewHTTPClient(rawURL string, o HTTPOptions) (*HTTPClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("hook url: %w", err)
	}
	dialer := &net.Dialer{Timeout: httpDialTimeout, KeepAlive: 30 * time.Second}
	switch u.Scheme {
	case "http":
		if u.Host == "" {
			return nil, fmt.Errorf("hook url %q: no host", rawURL)
		}
		addr := u.Host
		if u.Port() == "" {
			addr = net.JoinHostPort(u.Hostname(), "80")
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("hook url %q: %w", rawURL, err)
		}
		dial := func(ctx context.Context) (net.Conn, error) { return dialer.DialContext(ctx, "tcp", addr) }
		return &HTTPClient{h1: newH1Client(dial, u.Host, u.RequestURI()), prop: o.Propagator}, nil
	case "unix":
		if u.Host != "" || !strings.HasPrefix(u.Path, "/") {
			return nil, fmt.Errorf("hook url %q: want unix:///absolute/path", rawURL)
		}
		socket := u.Path
		dial := func(ctx context.Context) (net.Conn, error) { return dialer.DialContext(ctx, "unix", socket) }
		return &HTTPClient{h1: newH1Client(dial, "localhost", "/"), prop: o.Propagator}, nil
	}
	t := &http.Transport{
		// Hooks are local services: a proxy from the environment must not
		// redirect them.
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		TLSHandshakeTimeout:    httpDialTimeout,
		MaxIdleConns:           httpMaxIdleConns,
		MaxIdleConnsPerHost:    httpMaxIdleConns,
		IdleConnTimeout:        h1IdleTimeout,
		MaxResponseHeaderBytes: httpMaxAnswerHeaderBytes,
		// The answers are small and the hook near: compressing costs more
		// than it saves, and a gzip reader per answer allocates.
		DisableCompression: true,
		Protocols:          new(http.Protocols),
	}
	switch u.Scheme {
	case "https":
		t.Protocols.SetHTTP1(true)
		t.Protocols.SetHTTP2(true)
		// The transport adds "h2" to the config's NextProtos: the caller's
		// config must not change under it.
		t.TLSClientConfig = o.TLSConfig.Clone()
	case "h2c":
		t.Protocols.SetUnencryptedHTTP2(true)
		u.Scheme = "http"
	default:
		return nil, fmt.Errorf("hook url %q: scheme is not http, https, h2c or unix", rawURL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("hook url %q: no host", rawURL)
	}
	u.Fragment, u.RawFragment = "", ""
	return &HTTPClient{url: u, transport: t, prop: o.Propagator}, nil
}

// httpNewHeader returns the header of a request on the transport.
func httpNewHeader() http.Header {
	return http.Header{
		"Content-Type": httpContentType,
		// A check is safe to send again: so marked (and the header not
		// sent), the transport retries it on a fresh connection when a
		// kept-alive one turns out closed by the hook before it
		// answered, rather than failing the call.
		"Idempotency-Key": nil,
	}
}

// httpHeader is the header of every request on the transport without a
// trace context. Never modified.
var httpHeader = httpNewHeader()

// httpBody is a request's body on the transport: io.NopCloser of a
// bytes.Reader in one allocation.
type httpBody struct{ bytes.Reader }

func newHTTPBody(b []byte) *httpBody {
	body := new(httpBody)
	body.Reset(b)
	return body
}

func (*httpBody) Close() error { return nil }

// httpScratch is the memory of one Check, reused across calls.
type httpScratch struct {
	buf bytes.Buffer
	// req is the HTTP/1.1 request, head and body; lines its trace
	// context's header lines.
	req   []byte
	lines headerLines
	lr    io.LimitedReader
	ans   httpAnswer
}

var httpScratchPool = sync.Pool{New: func() any { return new(httpScratch) }}

// Check tells the hook of c and returns its decision, or an error when the
// hook cannot be reached, answers past ctx's deadline, or answers outside
// the protocol.
func (h *HTTPClient) Check(ctx context.Context, c *Call) (Decision, error) {
	s := httpScratchPool.Get().(*httpScratch)
	defer func() {
		if s.buf.Cap() <= httpMaxScratchBytes && cap(s.req) <= httpMaxScratchBytes {
			// Drop what the call referenced: the pool must not keep it alive.
			s.buf.Reset()
			s.lr, s.ans = io.LimitedReader{}, httpAnswer{}
			httpScratchPool.Put(s)
		}
	}()
	if err := httpAppendCall(&s.buf, c); err != nil {
		return Decision{}, err
	}
	if h.h1 != nil {
		return h.checkH1(ctx, s)
	}
	// The transport may read the body after RoundTrip returns (and again
	// on a retry), so it gets its own copy and the scratch stays ours.
	body := bytes.Clone(s.buf.Bytes())
	s.buf.Reset()
	// The transport only reads the header: without a trace context to
	// add, every request shares one.
	header := httpHeader
	if h.prop != nil {
		header = httpNewHeader()
		h.prop.Inject(ctx, propagation.HeaderCarrier(header))
	}
	req := (&http.Request{
		Method: http.MethodPost, URL: h.url, Host: h.url.Host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        header,
		Body:          newHTTPBody(body),
		GetBody:       func() (io.ReadCloser, error) { return newHTTPBody(body), nil },
		ContentLength: int64(len(body)),
	}).WithContext(ctx)
	// The transport itself, not an http.Client: a redirect is an answer
	// outside the protocol, not something to follow.
	resp, err := h.transport.RoundTrip(req)
	if err != nil {
		return Decision{}, fmt.Errorf("call hook: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Read a little of it so the connection is kept.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, httpMaxDrainBytes))
		return Decision{}, fmt.Errorf("hook answered status %d", resp.StatusCode)
	}
	if resp.ContentLength > httpMaxAnswerBytes {
		return Decision{}, fmt.Errorf("hook answer too large: %d bytes, over %d", resp.ContentLength, httpMaxAnswerBytes)
	}
	s.lr = io.LimitedReader{R: resp.Body, N: httpMaxAnswerBytes + 1}
	if _, err := s.buf.ReadFrom(&s.lr); err != nil {
		return Decision{}, fmt.Errorf("read hook answer: %w", err)
	}
	return s.decision()
}

// decision decodes the answer read into s.buf, which the read left one
// byte past httpMaxAnswerBytes when the answer is longer.
func (s *httpScratch) decision() (Decision, error) {
	if s.buf.Len() > httpMaxAnswerBytes {
		return Decision{}, fmt.Errorf("hook answer too large: over %d bytes", httpMaxAnswerBytes)
	}
	d, err := httpDecodeAnswer(&s.ans, s.buf.Bytes())
	if err != nil {
		return Decision{}, fmt.Errorf("hook answer: %w", err)
	}
	return d, nil
}

// checkH1 sends the request in s.buf over HTTP/1.1 and decodes the answer.
func (h *HTTPClient) checkH1(ctx context.Context, s *httpScratch) (Decision, error) {
	s.lines.b = s.lines.b[:0]
	if h.prop != nil {
		h.prop.Inject(ctx, &s.lines)
	}
	s.req = h.h1.appendHead(s.req[:0], s.buf.Len(), s.lines.b)
	s.req = append(s.req, s.buf.Bytes()...)
	s.buf.Reset()
	status, err := h.h1.roundTrip(ctx, s.req, &s.buf)
	if err != nil {
		return Decision{}, fmt.Errorf("call hook: %w", err)
	}
	if status != http.StatusOK {
		return Decision{}, fmt.Errorf("hook answered status %d", status)
	}
	return s.decision()
}

// Close closes the client's idle connections. A Check after Close dials
// again.
func (h *HTTPClient) Close() error {
	if h.h1 != nil {
		h.h1.closeIdle()
		return nil
	}
	h.transport.CloseIdleConnections()
	return nil
}

// httpAppendCall writes the request of c. It is written by hand: encoding/json
// on a struct costs a protojson copy of the body that it then compacts, and
// the sort of the header names.
func httpAppendCall(buf *bytes.Buffer, c *Call) error {
	b := buf.AvailableBuffer()
	b = append(b, `{"version":1,"stage":"request","id":`...)
	b = httpAppendString(b, c.ID)
	b = append(b, `,"transport":`...)
	b = httpAppendString(b, c.Transport)
	b = append(b, `,"method":`...)
	b = httpAppendString(b, c.Method)
	if c.CallerID != "" {
		b = append(b, `,"caller":{"apiKeyId":`...)
		b = httpAppendString(b, c.CallerID)
		b = append(b, '}')
	}
	if len(c.Headers) > 0 {
		b = append(b, `,"headers":{`...)
		first := true
		for name, values := range c.Headers {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = httpAppendString(b, name)
			b = append(b, ':', '[')
			for i, v := range values {
				if i > 0 {
					b = append(b, ',')
				}
				b = httpAppendString(b, v)
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	if c.Body != nil {
		b = append(b, `,"body":`...)
		if flat, ok := httpAppendFlatMessage(b, c.Body.ProtoReflect()); ok {
			b = flat
		} else {
			var err error
			if b, err = (protojson.MarshalOptions{}).MarshalAppend(b, c.Body); err != nil {
				return fmt.Errorf("hook request body: %w", err)
			}
		}
	}
	b = append(b, '}')
	buf.Write(b)
	return nil
}

// httpAppendFlatMessage appends m in its JSON mapping, as protojson does,
// when it is a flat message: fields of kinds string (valid UTF-8), bool,
// 32-bit integers and enums, none repeated, and no extension or required
// field, not one of google.protobuf's; ok is false for any other message,
// which protojson encodes.
// Written by hand because protojson costs a hook call 1.6 µs and 8
// allocations (its encoder, the sort of the fields and its closures) for
// the few fields of a request, about ten times this; no well-kept library
// encodes a message in its JSON mapping without them, short of generated
// code. TestHTTPAppendFlatMessage compares the two on every request of the
// API.
func httpAppendFlatMessage(b []byte, m protoreflect.Message) (_ []byte, ok bool) {
	md := m.Descriptor()
	// protojson has mappings of its own for google.protobuf's well-known
	// types (wrappers, Timestamp, Struct...).
	if md.ParentFile().Package() == "google.protobuf" || md.ExtensionRanges().Len() > 0 || md.RequiredNumbers().Len() > 0 {
		return b, false
	}
	b = append(b, '{')
	first := true
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Cardinality() == protoreflect.Repeated {
			return b, false
		}
		if !m.Has(fd) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = httpAppendString(b, fd.JSONName())
		b = append(b, ':')
		v := m.Get(fd)
		switch fd.Kind() {
		case protoreflect.StringKind:
			s := v.String()
			if !utf8.ValidString(s) {
				// protojson refuses it: so does the call.
				return b, false
			}
			b = httpAppendString(b, s)
		case protoreflect.BoolKind:
			b = strconv.AppendBool(b, v.Bool())
		case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
			b = strconv.AppendInt(b, v.Int(), 10)
		case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
			b = strconv.AppendUint(b, v.Uint(), 10)
		case protoreflect.EnumKind:
			ed := fd.Enum()
			if ed.FullName() == "google.protobuf.NullValue" {
				return b, false
			}
			if ev := ed.Values().ByNumber(v.Enum()); ev != nil {
				b = httpAppendString(b, string(ev.Name()))
			} else {
				b = strconv.AppendInt(b, int64(v.Enum()), 10)
			}
		default:
			return b, false
		}
	}
	return append(b, '}'), true
}

// httpAppendString appends s as a JSON string. Invalid UTF-8 becomes
// U+FFFD, as encoding/json does, so the request stays valid JSON.
func httpAppendString(b []byte, s string) []byte {
	// The error only reports invalid UTF-8, already replaced.
	b, _ = jsontext.AppendQuote(b, s)
	return b
}

// httpAnswer is the hook's answer as sent. Fields it does not know are
// ignored, so the protocol can grow.
type httpAnswer struct {
	Control         httpControl                 `json:"control"`
	Message         string                      `json:"message"`
	Reason          string                      `json:"reason"`
	Body            json.RawMessage             `json:"body"`
	ResponseHeaders map[string]httpHeaderValues `json:"responseHeaders"`
	CacheSeconds    float64                     `json:"cacheSeconds"`
}

// httpControl is "continue" or {"break":N}, N an HTTP status 400 to 599.
// The errors of the answer's decoding quote what the hook sent cut short,
// so that a hook cannot fill the log.
type httpControl struct {
	set bool
	brk int
}

var httpContinue = []byte(`"continue"`)

// UnmarshalJSON reads the control in place: the common "continue" costs no
// copy.
func (c *httpControl) UnmarshalJSON(b []byte) error {
	// A control given twice: the last one counts, as for any JSON key.
	*c = httpControl{set: true}
	if bytes.Equal(b, httpContinue) {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		// "continue" written with escapes.
		var s string
		if err := json.Unmarshal(b, &s); err == nil && s == "continue" {
			return nil
		}
	}
	var obj map[string]json.RawMessage
	if len(b) > 0 && b[0] == '{' && json.Unmarshal(b, &obj) == nil && len(obj) == 1 {
		if n, ok := obj["break"]; ok {
			status, err := strconv.Atoi(string(n))
			if err != nil || status < 400 || status > 599 {
				return fmt.Errorf("break %.40s is not a status 400 to 599", n)
			}
			c.brk = status
			return nil
		}
	}
	return fmt.Errorf(`control %.80s is neither "continue" nor {"break":N}`, b)
}

// httpHeaderValues are the values of one answer header: an array of
// strings, where encoding/json would also take null for the array or for a
// value.
type httpHeaderValues []string

// UnmarshalJSON takes an array of strings only.
func (v *httpHeaderValues) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if len(b) == 0 || b[0] != '[' || json.Unmarshal(b, &raw) != nil {
		return fmt.Errorf("header values %.80s are not an array of strings", b)
	}
	*v = make(httpHeaderValues, len(raw))
	for i, r := range raw {
		if len(r) == 0 || r[0] != '"' || json.Unmarshal(r, &(*v)[i]) != nil {
			return fmt.Errorf("header value %.80s is not a string", r)
		}
	}
	return nil
}

// httpMaxCacheSeconds is the longest cacheSeconds a time.Duration holds.
const httpMaxCacheSeconds = float64(math.MaxInt64 / int64(time.Second))

// httpDecodeAnswer maps an answer to its Decision, decoding it into a,
// which the caller reuses: the Decision shares no memory with it.
func httpDecodeAnswer(a *httpAnswer, b []byte) (Decision, error) {
	if httpPlainContinue(b) {
		return Decision{}, nil
	}
	return httpDecodeAnyAnswer(a, b)
}

// httpDecodeAnyAnswer is httpDecodeAnswer through encoding/json, for any
// answer.
func httpDecodeAnyAnswer(a *httpAnswer, b []byte) (Decision, error) {
	// Unmarshal would add to a map left from the last answer.
	*a = httpAnswer{}
	if err := json.Unmarshal(b, a); err != nil {
		return Decision{}, err
	}
	if !a.Control.set {
		return Decision{}, errors.New("no control")
	}
	if a.CacheSeconds < 0 || a.CacheSeconds > httpMaxCacheSeconds {
		return Decision{}, fmt.Errorf("cacheSeconds %v out of range", a.CacheSeconds)
	}
	headers, err := httpResponseHeaders(a.ResponseHeaders)
	if err != nil {
		return Decision{}, err
	}
	d := Decision{
		Break:           a.Control.brk,
		ResponseHeaders: headers,
		CacheFor:        time.Duration(a.CacheSeconds * float64(time.Second)),
	}
	hasBody := len(a.Body) > 0 && !bytes.Equal(a.Body, []byte("null"))
	if hasBody && a.Body[0] != '{' {
		return Decision{}, fmt.Errorf("body %.40s is not an object", a.Body)
	}
	if d.Break != 0 {
		if hasBody {
			return Decision{}, errors.New("body with a break")
		}
		d.Message, d.Reason = a.Message, a.Reason
		return d, nil
	}
	if hasBody {
		d.Body = a.Body
	}
	return d, nil
}

// httpPlainContinue reports whether b is the common answer,
// {"control":"continue"} and nothing else, JSON whitespace allowed between
// its tokens: its Decision is the zero one. Matched by hand because
// encoding/json's reflection costs a hook call more than the rest of the
// answer's handling; any other answer, however close, goes through it.
func httpPlainContinue(b []byte) bool {
	for _, token := range httpContinueTokens {
		b = bytes.TrimLeft(b, " \t\r\n")
		var ok bool
		if b, ok = bytes.CutPrefix(b, token); !ok {
			return false
		}
	}
	return len(bytes.TrimLeft(b, " \t\r\n")) == 0
}

// httpContinueTokens are the tokens of {"control":"continue"}.
var httpContinueTokens = [][]byte{[]byte("{"), []byte(`"control"`), []byte(":"), []byte(`"continue"`), []byte("}")}

// httpResponseHeaders checks the answer's headers and lowercases their
// names, merging the values of names that differ only in case.
func httpResponseHeaders(in map[string]httpHeaderValues) (map[string][]string, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(map[string][]string, len(in))
	for name, values := range in {
		if !httpguts.ValidHeaderFieldName(name) {
			return nil, fmt.Errorf("response header name %.80q is not valid", name)
		}
		for _, v := range values {
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil, fmt.Errorf("response header %q value %.80q is not valid", name, v)
			}
		}
		lower := strings.ToLower(name)
		out[lower] = append(out[lower], values...)
	}
	return out, nil
}
