package gateway

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/vanguard"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/interceptors/retryafter"
)

// The browser protocols (docs/browser.md): Connect (unary, JSON and
// proto) and gRPC-Web (binary and text) at POST /sheba.v1.<Service>/<Method>,
// transcoded by vanguard to the ServeHTTP of a grpc.Server that has the
// services behind the one chain: auth, limits, the hook, the metrics, the
// log line and the span are the chain's and the stats handler's, once, as
// for any gRPC call, and its errors reach the client in the protocol's own
// format with their ErrorInfo. In front of vanguard, the guards of the REST
// side that the chain cannot give, answered in the protocol's format:
//
//   - 405 with Allow: POST for another method, 415 for a type other than
//     those above (in the REST error format: such a request speaks no
//     browser protocol), unimplemented for a method the API has not;
//   - the key before the body: a call that needs a key and brings no valid
//     one goes on with an empty request message instead of its body,
//     which is never read, and the chain refuses it (401), as on REST;
//   - resource_exhausted BODY_TOO_LARGE for a body declared over
//     http.max_body_bytes, or sent without a length and longer (read here,
//     in its slot), or decompressed past it (boundedGzip); vanguard bounds
//     its buffers to the same size, and the grpc.Server the message;
//   - the body slots REST uses (bodyslots.go), the same ones: at most
//     http.max_concurrent_bodies bodies are read at once over both;
//   - Retry-After on every RESOURCE_EXHAUSTED answer (retryWriter).
//
// Connect JSON has the shape of the REST JSON (lowerCamelCase, defaults
// shown, unknown fields refused). Request compression is gzip, which
// vanguard undoes before the server; REST's compression handler is not on
// this path, as both protocols compress by their own rules.

// browserPrefix starts the path of every browser-protocol call: the sheba.v1
// services' full names.
const browserPrefix = "/sheba.v1."

// browserProtocol is one content type of the browser protocols.
type browserProtocol struct {
	// name is the protocol, as the request log names the transport.
	name string
	// contentType is the Content-Type vanguard is given, whatever case or
	// parameters the client wrote (it reads the codec from it literally).
	contentType string
	// empty is a request body holding the empty message, put in place of
	// the body of a call refused before its body is read.
	empty string
	// frame is what a body holds beside its message: gRPC-Web's 5-byte
	// frame header.
	frame int64
	// text: gRPC-Web's base64 form, which neither vanguard nor connect-go's
	// error writer speak: its body is decoded to binary gRPC-Web for
	// vanguard, and the answer encoded (textWriter).
	text bool
}

var (
	connectProto = &browserProtocol{name: ProtocolConnect, contentType: "application/proto"}
	connectJSON  = &browserProtocol{name: ProtocolConnect, contentType: "application/json", empty: "{}"}
	grpcWeb      = &browserProtocol{name: ProtocolGRPCWeb, contentType: grpcWebType, empty: "\x00\x00\x00\x00\x00", frame: 5}
	// Its body becomes binary gRPC-Web's.
	grpcWebText = &browserProtocol{name: ProtocolGRPCWeb, contentType: grpcWebType, empty: "AAAAAAA=", frame: 5, text: true}
)

// The types of binary and text gRPC-Web.
const (
	grpcWebType     = "application/grpc-web+proto"
	grpcWebTextType = "application/grpc-web-text+proto"
)

// The transports of browser calls, as BrowserProtocol names them.
const (
	ProtocolConnect = "connect"
	ProtocolGRPCWeb = "grpc-web"
)

// protocolOf returns the browser protocol of a Content-Type, or nil.
func protocolOf(contentType string) *browserProtocol {
	mt, _, _ := strings.Cut(contentType, ";")
	switch strings.ToLower(strings.TrimSpace(mt)) {
	case "application/proto":
		return connectProto
	case "application/json":
		return connectJSON
	case "application/grpc-web", "application/grpc-web+proto":
		return grpcWeb
	case "application/grpc-web-text", "application/grpc-web-text+proto":
		return grpcWebText
	}
	return nil
}

type browserKey struct{}

// BrowserProtocol returns the browser protocol of the call in ctx
// (ProtocolConnect or ProtocolGRPCWeb), or "" for a call that came another
// way.
func BrowserProtocol(ctx context.Context) string {
	p, _ := ctx.Value(browserKey{}).(*browserProtocol)
	if p == nil {
		return ""
	}
	return p.name
}

// browser serves the browser protocols.
type browser struct {
	transcoder *vanguard.Transcoder
	authn      Authenticator
	slots      *bodySlots
	maxBody    int64
	// methods are the full method names the API has.
	methods map[string]bool
	errors  *connect.ErrorWriter
	// gw writes the errors of requests that speak no browser protocol, as
	// REST does.
	gw *runtime.ServeMux
}

// newBrowser returns the handler of the browser protocols for the services
// of descs, served by srv (a grpc.Server's ServeHTTP).
func newBrowser(srv http.Handler, descs []*grpc.ServiceDesc, o Options, slots *bodySlots, gw *runtime.ServeMux) (*browser, error) {
	// vanguard keeps up to this much of a message in memory, in either
	// direction; every message fits in a uint32.
	maxBuffer := uint32(min(o.MaxBodyBytes, 1<<32-1))
	// What boundedGzip answers, complete with its retry hint (retryWriter
	// adds the header).
	tooLarge := connectError(reason.CompleteError(bodyTooLarge(int64(maxBuffer)), "", time.Second).GRPCStatus())
	services := make([]*vanguard.Service, len(descs))
	methods := map[string]bool{}
	for i, d := range descs {
		services[i] = vanguard.NewService(d.ServiceName, srv)
		for _, m := range d.Methods {
			methods["/"+d.ServiceName+"/"+m.MethodName] = true
		}
	}
	t, err := vanguard.NewTranscoder(services,
		vanguard.WithDefaultServiceOptions(
			vanguard.WithTargetProtocols(vanguard.ProtocolGRPC),
			vanguard.WithTargetCodecs(vanguard.CodecProto),
			// vanguard undoes the request's gzip itself, within the
			// bound below, and the server gets the message as it is.
			vanguard.WithNoTargetCompression(),
			vanguard.WithMaxMessageBufferBytes(maxBuffer),
		),
		vanguard.WithCodec(func(res vanguard.TypeResolver) vanguard.Codec {
			return &jsonCodec{JSONCodec: &vanguard.JSONCodec{
				// The shape of the REST JSON (gateway.go).
				MarshalOptions:   protojson.MarshalOptions{Resolver: res, EmitDefaultValues: true},
				UnmarshalOptions: protojson.UnmarshalOptions{Resolver: res},
			}}
		}),
		vanguard.WithCompression(vanguard.CompressionGzip,
			func() connect.Compressor { return gzip.NewWriter(io.Discard) },
			func() connect.Decompressor { return &boundedGzip{limit: int64(maxBuffer), tooLarge: tooLarge} }),
	)
	if err != nil {
		return nil, fmt.Errorf("gateway: browser protocols: %w", err)
	}
	return &browser{
		transcoder: t, authn: o.Authenticator, slots: slots, maxBody: o.MaxBodyBytes,
		methods: methods, errors: connect.NewErrorWriter(), gw: gw,
	}, nil
}

func (b *browser) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(b.gw, w, r, &runtime.HTTPStatusError{
			HTTPStatus: http.StatusMethodNotAllowed,
			Err:        reason.Error(codes.Unimplemented, reason.MethodNotAllowed, "method not allowed: send POST"),
		})
		return
	}
	ct := r.Header.Get("Content-Type")
	p := protocolOf(ct)
	if p == nil {
		r.Header.Del("Content-Type")
		writeError(b.gw, w, r, &runtime.HTTPStatusError{
			HTTPStatus: http.StatusUnsupportedMediaType,
			Err: reason.Error(codes.InvalidArgument, reason.UnsupportedMediaType, fmt.Sprintf(
				"unsupported content type %s: send application/json or application/proto (Connect), application/grpc-web or application/grpc-web-text (gRPC-Web)",
				reason.Quote(ct))),
		})
		return
	}
	if !b.methods[r.URL.Path] {
		b.writeError(w, r, p, status.Error(codes.Unimplemented, "unknown method "+reason.Quote(r.URL.Path)), 0)
		return
	}
	if p.name == ProtocolConnect && len(r.Header["Connect-Protocol-Version"]) == 0 {
		// vanguard takes a request without it for REST, which has no
		// routes here; Connect's own servers do not require it (curl
		// users seldom send it).
		r.Header.Set("Connect-Protocol-Version", "1")
	}
	r = r.WithContext(context.WithValue(r.Context(), browserKey{}, p))
	if !b.keyed(r) {
		// In memory already: it takes no body slot.
		r.Body, r.ContentLength = io.NopCloser(strings.NewReader(p.empty)), int64(len(p.empty))
		r.Header.Del("Content-Encoding")
		r.Header.Del("Content-Length")
	} else {
		if b.declaredOverLimit(r, p) {
			b.writeError(w, r, p, bodyTooLarge(b.maxBody), time.Second)
			return
		}
		var release func()
		var busy bool
		if r, release, busy = b.slots.take(r); busy {
			b.writeError(w, r, p, errNoBodySlot, time.Second)
			return
		}
		defer release()
		if r.ContentLength < 0 && !b.readUnsized(w, r, p) {
			return
		}
	}
	if ct != p.contentType {
		r.Header.Set("Content-Type", p.contentType)
	}
	if p.text {
		r.Body = struct {
			io.Reader
			io.Closer
		}{base64.NewDecoder(base64.StdEncoding, r.Body), r.Body}
		r.ContentLength = -1
		r.Header.Del("Content-Length")
		tw := &textWriter{ResponseWriter: w}
		defer tw.close()
		w = tw
	}
	b.transcoder.ServeHTTP(retryWriter{w}, r)
}

// retryWriter adds Retry-After: 1 to an answer of RESOURCE_EXHAUSTED that
// has none: one that vanguard decided (a message over its buffer, a body
// that decompresses past the limit), which Connect answers HTTP 429 and
// gRPC-Web with grpc-status 8 in its headers. The chain's answers bring
// their own.
type retryWriter struct {
	http.ResponseWriter
}

func (w retryWriter) WriteHeader(code int) {
	h := w.Header()
	if (code == http.StatusTooManyRequests || h.Get("Grpc-Status") == resourceExhausted) && h.Get(retryAfterHeader) == "" {
		h.Set(retryAfterHeader, "1")
	}
	w.ResponseWriter.WriteHeader(code)
}

// Flush is the writer's: vanguard needs an http.Flusher.
func (w retryWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// resourceExhausted is RESOURCE_EXHAUSTED in a grpc-status header.
var resourceExhausted = strconv.Itoa(int(codes.ResourceExhausted))

// readUnsized reads the body of a request that declares no length (chunked)
// into memory, in its body slot, and reports whether it fits the limit;
// when it does not, or cannot be read, it answers. vanguard would bound it
// too, but with an error of its own, without sheba's ErrorInfo.
func (b *browser) readUnsized(w http.ResponseWriter, r *http.Request, p *browserProtocol) bool {
	limit := b.maxBody + p.frame
	if p.text {
		limit = int64(base64.StdEncoding.EncodedLen(int(limit)))
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	switch {
	case int64(len(body)) > limit:
		b.writeError(w, r, p, bodyTooLarge(b.maxBody), time.Second)
		return false
	case err != nil:
		b.writeError(w, r, p, reason.Error(codes.InvalidArgument, reason.MalformedBody, "the request body could not be read"), 0)
		return false
	}
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	return true
}

// declaredOverLimit reports whether the Content-Length of r says that its
// message is over the limit.
func (b *browser) declaredOverLimit(r *http.Request, p *browserProtocol) bool {
	n := r.ContentLength
	if p.text {
		n = int64(base64.StdEncoding.DecodedLen(int(n)))
	}
	return n-p.frame > b.maxBody
}

// keyed reports whether the body of r may be read: the call brings a valid
// key, or its method needs none.
func (b *browser) keyed(r *http.Request) bool {
	return b.authn.Known(credential(r.Header, apiKeyHeaders[:1]), credential(r.Header, authorizationHeaders[:1])) ||
		b.authn.Public(r.URL.Path)
}

// writeError answers err, completed with its ErrorInfo (and, when retry is
// positive, a RetryInfo of retry and Retry-After) as the chain completes
// its own, in the format of protocol p. Every RESOURCE_EXHAUSTED carries a
// retry hint, as the chain's do: Connect answers it HTTP 429, and every 429
// of sheba says when to retry.
func (b *browser) writeError(w http.ResponseWriter, r *http.Request, p *browserProtocol, err error, retry time.Duration) {
	se := reason.CompleteError(err, "", retry)
	if d := se.Delay(); d > 0 {
		w.Header().Set(retryAfterHeader, strconv.FormatInt(retryafter.Seconds(d), 10))
	}
	if p.text {
		// A copy of the request that the writer takes for binary
		// gRPC-Web, whose error is all in its headers, and the answer's
		// type put back.
		r = r.Clone(r.Context())
		r.Header.Set("Content-Type", grpcWebType)
		w = &textWriter{ResponseWriter: w}
	}
	_ = b.errors.Write(w, r, connectError(se.GRPCStatus()))
}

// connectError is st as connect-go's error, its details kept.
func connectError(st *status.Status) *connect.Error {
	ce := connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
	for _, d := range st.Proto().GetDetails() {
		if ed, err := connect.NewErrorDetail(d); err == nil {
			ce.AddDetail(ed)
		}
	}
	return ce
}

// textWriter turns a binary gRPC-Web answer into its text form: the type,
// and the body in base64, one string padded at its end (close). A unary
// answer's frames are short, so one string serves every client.
type textWriter struct {
	http.ResponseWriter
	wrote bool
	enc   io.WriteCloser
}

func (w *textWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	w.wrote = true
	w.Header().Set("Content-Type", grpcWebTextType)
	w.Header().Del("Content-Length")
	w.ResponseWriter.WriteHeader(code)
}

func (w *textWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if w.enc == nil {
		w.enc = base64.NewEncoder(base64.StdEncoding, w.ResponseWriter)
	}
	return w.enc.Write(b)
}

// Flush sends what is encoded so far (vanguard needs an http.Flusher).
func (w *textWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *textWriter) close() {
	if w.enc != nil {
		_ = w.enc.Close()
	}
}

// jsonCodec is vanguard's JSON codec whose decoding errors are the client's:
// INVALID_ARGUMENT MALFORMED_BODY quoting at most reason.MaxQuoted bytes,
// where vanguard would answer any error of a codec as the server's
// (unknown, 502).
type jsonCodec struct {
	*vanguard.JSONCodec
}

func (c *jsonCodec) Unmarshal(data []byte, msg proto.Message) error {
	if err := c.JSONCodec.Unmarshal(data, msg); err != nil {
		return connectError(status.Convert(reason.Error(codes.InvalidArgument, reason.MalformedBody, reason.Clip(reason.ValidUTF8(err.Error())))))
	}
	return nil
}

// boundedGzip is a gzip decompressor that fails once it has given more
// than limit bytes: vanguard decompresses a request into memory and sets no
// bound of its own there, so without it a small body could grow without
// end. (It holds at most one read's buffer beyond the limit.)
type boundedGzip struct {
	gz       gzip.Reader
	limit, n int64
	tooLarge *connect.Error
}

func (d *boundedGzip) Reset(r io.Reader) error {
	d.n = 0
	if err := d.gz.Reset(r); err != nil {
		return errNotGzip
	}
	return nil
}

func (d *boundedGzip) Read(p []byte) (int, error) {
	n, err := d.gz.Read(p)
	if d.n += int64(n); d.n > d.limit {
		return n, d.tooLarge
	}
	if err != nil && !errors.Is(err, io.EOF) {
		err = errNotGzip
	}
	return n, err
}

// errNotGzip answers a request body that says it is gzip and is not.
var errNotGzip = connectError(status.Convert(reason.Error(codes.InvalidArgument, reason.MalformedBody, "request body is not valid gzip")))

func (d *boundedGzip) Close() error { return d.gz.Close() }
