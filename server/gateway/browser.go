package gateway

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/binary"
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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/shebasvc/sheba/codec/protobound"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/interceptors/retryafter"
	"github.com/shebasvc/sheba/interceptors/tracing"
)

// The browser protocols (docs/browser.md): Connect (unary, JSON and
// proto) and gRPC-Web (binary and text) at POST /sheba.v1.<Service>/<Method>.
// With Options.ConnectHandlers, a unary call is served by connect-go's
// handler of its method, which calls it over the Channel on the request
// goroutine (browserconnect.go); a server stream, and every call without
// it, is transcoded by vanguard to the ServeHTTP of a grpc.Server that has
// the services behind the one chain. Either way, auth, limits, the hook, the metrics, the
// log line and the span are the chain's and the stats handler's, once, as
// for any gRPC call, and its errors reach the client in the protocol's own
// format with their ErrorInfo. In front of vanguard, the guards of the REST
// side that the chain cannot give, answered in the protocol's format:
//
//   - in the REST error format, as such a request speaks no browser
//     protocol: 404 for a path the API has not, 405 with Allow: POST for
//     another method, 415 for a type other than those above;
//   - the key before the body: a call that needs a key and brings no valid
//     one goes on with an empty request message instead of its body,
//     which is never read, and the chain refuses it (401), as on REST;
//   - a keyed call's body is read into memory in its body slot (the slots
//     REST uses, bodyslots.go: at most http.max_concurrent_bodies bodies
//     are read at once over both), the body of a public method's call
//     without a key within its own small bound and without a slot
//     (publicbody.go), and either is decoded there (body): gRPC-Web
//     text's base64, its frame, the gzip of either protocol, and the
//     protobuf message, so that what does not decode is the client's
//     INVALID_ARGUMENT MALFORMED_BODY, as on REST (grpc-go would decode it
//     before the chain and answer INTERNAL), and vanguard gets a body it
//     accepts as it is; a protobuf message whose repeated field is over
//     its bound is not unmarshalled but passed on, for the grpc.Server's
//     codec to refuse it through the chain (server.Codec);
//   - resource_exhausted BODY_TOO_LARGE for a message over
//     grpc.max_recv_bytes (or http.max_body_bytes, when that is smaller;
//     a public method's without a key: over publicBodyBytes), as
//     declared, as read, or decompressed;
//   - the protocol headers vanguard would refuse without an ErrorInfo: a
//     timeout that does not parse (INVALID_ARGUMENT), an encoding other
//     than gzip (UNSUPPORTED_CONTENT_ENCODING);
//   - Retry-After on every RESOURCE_EXHAUSTED answer (retryWriter).
//
// Connect JSON has the shape of the REST JSON (lowerCamelCase, defaults
// shown, unknown fields refused). Request compression is gzip, undone here;
// REST's compression handler is not on this path, as both protocols
// compress by their own rules.

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
	// the body of a call refused before its body is read. Never modified.
	empty []byte
	// frame is what a body holds beside its message: gRPC-Web's 5-byte
	// frame header.
	frame int64
	// json: the message is JSON, which vanguard's codec decodes
	// (jsonCodec); else protobuf, which body decodes.
	json bool
	// text: gRPC-Web's base64 form, which neither vanguard nor connect-go's
	// error writer speak: its body is decoded to binary gRPC-Web for
	// vanguard (body), and the answer encoded (textWriter).
	text bool
	// unary and streams: whether it calls unary methods, server-streaming
	// ones, or both (gRPC-Web). Connect has a type of each kind.
	unary, streams bool
	// encoding is the header naming the compression of a framed message.
	encoding string
	// frameName names its frame in errors.
	frameName string
}

var (
	connectProto = &browserProtocol{name: ProtocolConnect, contentType: "application/proto", unary: true}
	connectJSON  = &browserProtocol{name: ProtocolConnect, contentType: "application/json", empty: []byte("{}"), json: true, unary: true}
	// Connect's server streaming: the request is one message in an
	// envelope (the frame of gRPC-Web), the answer a message per envelope.
	connectStreamProto = &browserProtocol{name: ProtocolConnect, contentType: "application/connect+proto",
		empty: make([]byte, 5), frame: 5, streams: true, encoding: "Connect-Content-Encoding", frameName: "Connect envelope"}
	connectStreamJSON = &browserProtocol{name: ProtocolConnect, contentType: "application/connect+json",
		empty: []byte("\x00\x00\x00\x00\x02{}"), frame: 5, json: true, streams: true, encoding: "Connect-Content-Encoding", frameName: "Connect envelope"}
	grpcWeb = &browserProtocol{name: ProtocolGRPCWeb, contentType: grpcWebType, empty: make([]byte, 5), frame: 5,
		unary: true, streams: true, encoding: "Grpc-Encoding", frameName: "gRPC-Web frame"}
	// Its body becomes binary gRPC-Web's.
	grpcWebText = &browserProtocol{name: ProtocolGRPCWeb, contentType: grpcWebType, empty: make([]byte, 5), frame: 5, text: true,
		unary: true, streams: true, encoding: "Grpc-Encoding", frameName: "gRPC-Web frame"}
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
	case "application/connect+proto":
		return connectStreamProto
	case "application/connect+json":
		return connectStreamJSON
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
	// maxMessage bounds a call's message, as sent and decompressed.
	maxMessage int64
	bounds     *protobound.Bounds
	// methods are the full method names the API has, each with the type
	// of its request message.
	methods map[string]protoreflect.MessageType
	// streams are the full names of the server-streaming methods.
	streams map[string]bool
	// writeTimeout is http.write_timeout, which bounds each write of a
	// stream's answer rather than the whole stream (streamWriter).
	writeTimeout time.Duration
	errors       *connect.ErrorWriter
	// handlers, when not nil, are connect-go's handlers of the unary
	// methods (Options.ConnectHandlers), by full method name, which serve
	// their calls in place of vanguard.
	handlers map[string]http.Handler
	// spans start the spans of the calls handlers serve; nil without
	// tracing.
	spans *browserSpans
	// allHeaders: the calls' metadata has every header of the request
	// (Options.ShareRequest: the hook reads its headers there).
	allHeaders bool
	// gw writes the errors of requests that speak no browser protocol, as
	// REST does.
	gw *runtime.ServeMux
}

// newBrowser returns the handler of the browser protocols for services,
// served by srv (a grpc.Server's ServeHTTP).
func newBrowser(srv http.Handler, conn *Channel, services []*shebav1.ServiceTable, o Options, slots *bodySlots, gw *runtime.ServeMux) (*browser, error) {
	maxMessage := o.MaxBodyBytes
	if o.MaxMessageBytes > 0 {
		maxMessage = min(maxMessage, o.MaxMessageBytes)
	}
	vservices := make([]*vanguard.Service, len(services))
	methods := map[string]protoreflect.MessageType{}
	streams := map[string]bool{}
	for i, svc := range services {
		vservices[i] = vanguard.NewService(svc.Name, srv)
		for _, m := range svc.Methods {
			methods[m.FullName] = m.NewRequest().ProtoReflect().Type()
			streams[m.FullName] = m.ServerStreams
		}
	}
	t, err := vanguard.NewTranscoder(vservices,
		vanguard.WithDefaultServiceOptions(
			vanguard.WithTargetProtocols(vanguard.ProtocolGRPC),
			vanguard.WithTargetCodecs(vanguard.CodecProto),
			// The server gets the message as it is.
			vanguard.WithNoTargetCompression(),
			vanguard.WithMaxMessageBufferBytes(bufferBytes(o.MaxBodyBytes)),
		),
		vanguard.WithCodec(func(res vanguard.TypeResolver) vanguard.Codec {
			return &jsonCodec{JSONCodec: &vanguard.JSONCodec{
				// The shape of the REST JSON (gateway.go).
				MarshalOptions:   protojson.MarshalOptions{Resolver: res, EmitDefaultValues: true},
				UnmarshalOptions: protojson.UnmarshalOptions{Resolver: res},
			}}
		}),
		// gzip for the answers of clients that accept it. The requests'
		// gzip is undone before vanguard (body), so vanguard's
		// decompressor is the bounded one only so that none is unbounded.
		vanguard.WithCompression(vanguard.CompressionGzip,
			func() connect.Compressor { return gzip.NewWriter(io.Discard) },
			func() connect.Decompressor { return &vanguardGzip{boundedGzip: boundedGzip{limit: maxMessage}} }),
	)
	if err != nil {
		return nil, fmt.Errorf("gateway: browser protocols: %w", err)
	}
	var handlers map[string]http.Handler
	var spans *browserSpans
	if o.ConnectHandlers {
		spans = newBrowserSpans(o.TracerProvider)
		var sh *tracing.ServerHandler
		if spans != nil {
			sh = spans.handler
		}
		codec := o.Codec
		if codec == nil {
			codec = encoding.GetCodecV2(grpcproto.Name)
		}
		handlers = newConnectHandlers(conn, services, codec, sh, o.CompressMinBytes)
	}
	return &browser{
		handlers: handlers, spans: spans, allHeaders: o.ShareRequest, transcoder: t, authn: o.Authenticator, slots: slots, maxMessage: maxMessage, bounds: o.RepeatedBounds,
		methods: methods, streams: streams, writeTimeout: o.WriteTimeout, errors: connect.NewErrorWriter(), gw: gw,
	}, nil
}

// maxAnswerBytes is the least that vanguard buffers of a message: 4 MiB,
// grpc-go's default bound on the messages a client receives.
const maxAnswerBytes = 4 << 20

// bufferBytes is how much of a message vanguard keeps in memory, in either
// direction: a request's is bounded before (body), so this bounds the
// answers, which may be larger than a request (a page of a list). It is as
// much as a gRPC client takes by default, or the body limit if more: at
// most maxBodyLimit (New), which a uint32 holds.
func bufferBytes(maxBody int64) uint32 {
	return uint32(max(maxBody, maxAnswerBytes))
}

func (b *browser) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ct := r.Header.Get("Content-Type")
	p := protocolOf(ct)
	in, known := b.methods[r.URL.Path]
	stream := b.streams[r.URL.Path]
	if p != nil && !(stream && p.streams || !stream && p.unary) {
		// Connect's type of the other kind of method.
		p = nil
	}
	if p == nil {
		// So that the REST error is JSON, whatever the type.
		r.Header.Del("Content-Type")
	}
	switch {
	case !known:
		// A path the API has not, answered as REST answers one
		// (docs/api.md: an unknown path is 404); the clients of both
		// protocols read a 404 as unimplemented.
		writeError(b.gw, w, r, errRouteNotFound)
		return
	case r.Method != http.MethodPost:
		w.Header().Set("Allow", http.MethodPost)
		writeError(b.gw, w, r, &runtime.HTTPStatusError{
			HTTPStatus: http.StatusMethodNotAllowed,
			Err:        reason.Error(codes.Unimplemented, reason.MethodNotAllowed, "method not allowed: send POST"),
		})
		return
	case p == nil:
		connectTypes := "application/json or application/proto (Connect)"
		if stream {
			connectTypes = "application/connect+json or application/connect+proto (Connect, a server-streaming method)"
		}
		writeError(b.gw, w, r, &runtime.HTTPStatusError{
			HTTPStatus: http.StatusUnsupportedMediaType,
			Err: reason.Error(codes.InvalidArgument, reason.UnsupportedMediaType, fmt.Sprintf(
				"unsupported content type %s: send %s, application/grpc-web or application/grpc-web-text (gRPC-Web)",
				reason.Quote(ct), connectTypes)),
		})
		return
	}
	// From here on, vanguard and the error writer read the protocol's
	// own type.
	if ct != p.contentType || len(r.Header["Content-Type"]) != 1 {
		r.Header.Set("Content-Type", p.contentType)
	}
	if err := badTimeout(r.Header, p); err != nil {
		b.writeError(w, r, p, err)
		return
	}
	if v := r.Header["Connect-Protocol-Version"]; p.name == ProtocolConnect && (len(v) != 1 || v[0] != "1") {
		// vanguard takes a request without it for REST, which has no
		// routes here; Connect's own servers do not require it (curl
		// users seldom send it), and version 1 is the only one.
		r.Header.Set("Connect-Protocol-Version", "1")
	}
	r = r.WithContext(context.WithValue(r.Context(), browserKey{}, p))
	var body []byte
	var err error
	switch {
	case b.authn.Known(credential(r.Header, apiKeyHeaders[:1]), credential(r.Header, authorizationHeaders[:1])):
		body, err = b.body(w, r, p, in, b.maxMessage, b.slots)
	case b.authn.Public(r.URL.Path):
		// Within its own bound, without a slot (publicbody.go); one over
		// it is not read.
		if body, err = b.body(w, r, p, in, publicBodyBytes, nil); status.Code(err) == codes.ResourceExhausted {
			closeAfterAnswer(w, r)
		}
	default:
		// Its body is never read: the chain refuses the call.
		body = p.empty
	}
	if err != nil {
		b.writeError(w, r, p, err)
		return
	}
	setBody(r, body)
	// The body is binary and uncompressed now.
	r.Header.Del("Content-Encoding")
	r.Header.Del("Grpc-Encoding")
	r.Header.Del("Connect-Content-Encoding")
	r.Header.Del("Content-Length")
	if stream {
		// Each write of a stream's answer has http.write_timeout of its
		// own, which net/http counts from the request's headers.
		w = &streamWriter{ResponseWriter: w, timeout: b.writeTimeout}
	}
	if p.text {
		tw := &textWriter{ResponseWriter: w, stream: stream}
		defer tw.close()
		w = tw
	}
	if h := b.handlers[r.URL.Path]; h != nil {
		// The call's metadata is made of its headers and client address,
		// as a REST call's (incomingMetadata).
		if b.spans != nil {
			var end func()
			r, end = b.spans.start(r)
			defer end()
		}
		if v := r.Header.Get("Connect-Timeout-Ms"); len(v) > maxConnectTimeoutDigits {
			// connect-go refuses a timeout of more digits than Connect
			// allows, without an ErrorInfo; vanguard takes it (badTimeout
			// has checked that it parses), and so do these handlers: as
			// its own value without leading zeros, or the longest, over
			// 115 days.
			n, _ := strconv.ParseInt(v, 10, 64)
			r.Header.Set("Connect-Timeout-Ms", strconv.FormatInt(min(n, maxConnectTimeout), 10))
		}
		r = r.WithContext(browserCall(r, b.allHeaders))
		h.ServeHTTP(unaryWriter{retryWriter{w}}, r)
		return
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

// Flush is the writer's: vanguard needs an http.Flusher. connect-go
// flushes a gRPC-Web answer that is all headers without writing its status
// first (net/http writes 200), so the headers are completed here too.
func (w retryWriter) Flush() {
	w.completeHeaders()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w retryWriter) completeHeaders() {
	if h := w.Header(); h.Get("Grpc-Status") == resourceExhausted && h.Get(retryAfterHeader) == "" {
		h.Set(retryAfterHeader, "1")
	}
}

// unaryWriter is the writer of connect-go's unary handlers: its Flush
// completes the headers as retryWriter's does and leaves the answer in
// net/http's buffer, which writes it when the handler returns. connect-go
// flushes a gRPC-Web answer after its message and again after its
// trailers: on HTTP/1.1 that was three writes to the socket (the headers
// and the message, the trailers, the last chunk) and a chunked body, where
// a unary answer needs one write with its Content-Length.
type unaryWriter struct{ retryWriter }

func (w unaryWriter) Flush() {
	w.completeHeaders()
	if tw, ok := w.ResponseWriter.(*textWriter); ok {
		// An answer that is all headers gets the text type, as
		// textWriter.Flush gives it.
		tw.WriteHeader(http.StatusOK)
	}
}

// maxConnectTimeoutDigits is the most digits of a Connect-Timeout-Ms that
// connect-go takes (the Connect protocol's bound).
const (
	maxConnectTimeoutDigits = 10
	maxConnectTimeout       = 9_999_999_999
)

// resourceExhausted is RESOURCE_EXHAUSTED in a grpc-status header.
var resourceExhausted = strconv.Itoa(int(codes.ResourceExhausted))

// body reads the body of a call of protocol p, at most maxBody bytes of
// message, in a body slot of slots (none when slots is nil), and
// returns it as vanguard is to get it: binary gRPC-Web or the Connect
// message, uncompressed, its frame checked and its protobuf message one of
// type in (vanguard's JSON codec decodes JSON: jsonCodec); or the error to
// answer. The body of a gRPC-Web text call is one base64 string, padded at
// its end only, as a unary call's is (several padded strings one after the
// other, as a streaming client may send, are not); line breaks in it are
// skipped.
func (b *browser) body(w http.ResponseWriter, r *http.Request, p *browserProtocol, in protoreflect.MessageType, maxBody int64, slots *bodySlots) ([]byte, error) {
	limit, sent := p.bounds(maxBody)
	if r.ContentLength > sent {
		return nil, bodyTooLarge(maxBody)
	}
	if slots != nil {
		var release func()
		var busy bool
		if r, release, busy = slots.take(w, r); busy {
			return nil, errNoBodySlot
		}
		defer release()
	}
	body, err := readAll(r, sent)
	switch {
	case errors.Is(err, errOverLimit):
		return nil, bodyTooLarge(maxBody)
	case err != nil:
		return nil, malformed("the request body could not be read")
	}
	if p.text {
		bin := make([]byte, base64.StdEncoding.DecodedLen(len(body)))
		n, err := base64.StdEncoding.Decode(bin, body)
		if err != nil {
			return nil, malformed(fmt.Sprintf("the request body is not one base64 string (%v)", err))
		}
		if body = bin[:n]; int64(len(body)) > limit {
			return nil, bodyTooLarge(maxBody)
		}
	}
	msg, compressed, enc := body, false, r.Header.Get("Content-Encoding")
	if p.frame > 0 {
		if len(body) < 5 {
			return nil, malformed(fmt.Sprintf("the request body is not a %s: 5 bytes of header, then the message", p.frameName))
		}
		flag, n := body[0], binary.BigEndian.Uint32(body[1:5])
		switch {
		case flag > 1:
			return nil, malformed(fmt.Sprintf("the request's %s has flag %#02x: a message's is 0, or 1 when compressed", p.frameName, flag))
		case int64(n) != int64(len(body)-5):
			return nil, malformed(fmt.Sprintf("the request's %s says %d bytes and holds %d: a call's body is one %[1]s", p.frameName, n, len(body)-5))
		}
		msg, compressed, enc = body[5:], flag == 1, r.Header.Get(p.encoding)
	} else {
		compressed = enc != "" && enc != "identity"
	}
	if compressed {
		switch {
		case strings.EqualFold(enc, "gzip"):
			if msg, err = gunzip(msg, maxBody); err != nil {
				return nil, err
			}
		case enc == "" || enc == "identity":
			return nil, malformed(fmt.Sprintf("the request's %s is compressed, and %s names no compression: send %[2]s: gzip", p.frameName, p.encoding))
		default:
			return nil, reason.Error(codes.InvalidArgument, reason.UnsupportedContentEncoding,
				fmt.Sprintf("unsupported encoding %s: send gzip, or no compression", reason.Quote(enc)))
		}
	}
	if !p.json && len(msg) > 0 {
		// A message over a repeated field's bound is left unread, for the
		// chain to refuse (server.Codec): vanguard passes a protobuf
		// message on as it is.
		if _, over := b.bounds.CheckWire(in.Descriptor(), msg); !over {
			if err := proto.Unmarshal(msg, in.New().Interface()); err != nil {
				return nil, malformed(reason.Clip(reason.ValidUTF8(fmt.Sprintf("the request body is not a %s message: %v", in.Descriptor().FullName(), err))))
			}
		}
	}
	switch {
	case p.frame == 0:
		return msg, nil
	case compressed:
		// The message in a frame of its own, uncompressed.
		return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg))), msg...), nil
	}
	return body, nil
}

// memBody is a request body in memory: a bytes.Reader that closes, in one
// allocation where io.NopCloser would add a second.
type memBody struct {
	bytes.Reader
}

func (*memBody) Close() error { return nil }

// malformed is the error of a request body that does not decode.
func malformed(msg string) error {
	return reason.Error(codes.InvalidArgument, reason.MalformedBody, msg)
}

// bounds returns the most a body of p may hold for a message of at most
// maxBody bytes: limit once decoded from base64 (the message and its
// frame), sent as sent (for gRPC-Web text, the base64 of that). maxBody
// is at most maxBodyLimit (New), so neither sum overflows.
func (p *browserProtocol) bounds(maxBody int64) (limit, sent int64) {
	limit = maxBody + p.frame
	sent = limit
	if p.text {
		sent = textLen(limit)
	}
	return limit, sent
}

// textLen is the most the base64 form of n bytes may take as sent in a
// gRPC-Web text body: the base64 itself, and room for a line break every
// 64 characters, which the decoder skips (a client may wrap its base64 as
// PEM and MIME do).
func textLen(n int64) int64 {
	e := int64(base64.StdEncoding.EncodedLen(int(n)))
	return e + e/32 + 2
}

// badTimeout returns the error of a timeout header of p that does not
// parse, which vanguard would answer without an ErrorInfo: Connect's
// Connect-Timeout-Ms, whole milliseconds, and gRPC-Web's Grpc-Timeout, at
// most 8 digits and a unit. The rules are vanguard's own.
func badTimeout(h http.Header, p *browserProtocol) error {
	name := "Grpc-Timeout"
	if p.name == ProtocolConnect {
		name = "Connect-Timeout-Ms"
	}
	v := h.Get(name)
	if v == "" {
		return nil
	}
	digits := v
	if name == "Grpc-Timeout" {
		if len(v) < 2 || !strings.Contains("HMSmun", v[len(v)-1:]) {
			digits = ""
		} else {
			digits = v[:len(v)-1]
		}
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err == nil && n >= 0 && (name != "Grpc-Timeout" || n <= 99999999) {
		return nil
	}
	return reason.Error(codes.InvalidArgument, reason.InvalidArgument, fmt.Sprintf("invalid %s %s", name, reason.Quote(v)))
}

// writeError answers err, completed with its ErrorInfo (and, for
// RESOURCE_EXHAUSTED, a RetryInfo of a second and Retry-After) as the chain
// completes its own, in the format of protocol p. Every RESOURCE_EXHAUSTED
// carries a retry hint, as the chain's do: Connect answers it HTTP 429, and
// every 429 of sheba says when to retry.
func (b *browser) writeError(w http.ResponseWriter, r *http.Request, p *browserProtocol, err error) {
	se := complete(err)
	if d := se.Delay(); d > 0 {
		w.Header().Set(retryAfterHeader, strconv.FormatInt(retryafter.Seconds(d), 10))
	}
	if p.text {
		// The request's type is binary gRPC-Web's already (ServeHTTP),
		// whose error is all in its headers: the writer puts the text
		// type back.
		tw := &textWriter{ResponseWriter: w}
		defer tw.close()
		w = tw
	}
	_ = b.errors.Write(w, r, connectError(se.GRPCStatus()))
}

// complete returns err with its ErrorInfo and, for RESOURCE_EXHAUSTED, a
// RetryInfo of a second.
func complete(err error) *reason.StatusError {
	var retry time.Duration
	if status.Code(err) == codes.ResourceExhausted {
		retry = time.Second
	}
	return reason.CompleteError(err, "", retry)
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
// answer's frames are short, so one string serves every client. A stream's
// answer is a padded string per flush (a message, or the trailers), as
// gRPC-Web's text clients read a stream: a message then waits for no later
// bytes to complete its base64.
type textWriter struct {
	http.ResponseWriter
	wrote  bool
	stream bool
	enc    io.WriteCloser
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

// Flush sends what is encoded so far (vanguard needs an http.Flusher); a
// stream's, padded. An answer that is all headers (connect-go flushes one
// without writing its status) gets the text type too.
func (w *textWriter) Flush() {
	w.WriteHeader(http.StatusOK)
	if w.stream && w.enc != nil {
		_ = w.enc.Close()
		w.enc = nil
	}
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

// boundedGzip is a gzip decompressor that fails with errGzipOverLimit once
// it has given more than limit bytes, where gzip.Reader sets no bound, so
// that a small body cannot grow without end. (It holds at most one read's
// buffer beyond the limit.) Its errors are errGzipOverLimit and
// errNotGzip: gzipError makes the answer of each.
type boundedGzip struct {
	gz       gzip.Reader
	limit, n int64
}

// The errors of boundedGzip.
var (
	errGzipOverLimit = errors.New("gzip body over the limit")
	errNotGzip       = errors.New("not gzip")
)

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
		return n, errGzipOverLimit
	}
	if err != nil && !errors.Is(err, io.EOF) {
		err = errNotGzip
	}
	return n, err
}

func (d *boundedGzip) Close() error { return d.gz.Close() }

// gzipError is the answer to an error of boundedGzip.
func gzipError(err error, limit int64) error {
	if errors.Is(err, errGzipOverLimit) {
		return bodyTooLarge(limit)
	}
	return malformed("request body is not valid gzip")
}

// gunzip decompresses data, at most limit bytes of it, or returns the error
// to answer.
func gunzip(data []byte, limit int64) ([]byte, error) {
	d := &boundedGzip{limit: limit}
	if err := d.Reset(bytes.NewReader(data)); err != nil {
		return nil, gzipError(err, limit)
	}
	out, err := io.ReadAll(d)
	if err != nil {
		return nil, gzipError(err, limit)
	}
	return out, nil
}

// vanguardGzip is boundedGzip as vanguard's decompressor, whose errors are
// connect-go's, made for each call (a *connect.Error writes its metadata on
// first use), with the retry hint of every RESOURCE_EXHAUSTED.
type vanguardGzip struct {
	boundedGzip
}

func (d *vanguardGzip) Reset(r io.Reader) error {
	return d.connectError(d.boundedGzip.Reset(r))
}

func (d *vanguardGzip) Read(p []byte) (int, error) {
	n, err := d.boundedGzip.Read(p)
	if errors.Is(err, io.EOF) {
		return n, err
	}
	return n, d.connectError(err)
}

func (d *vanguardGzip) connectError(err error) error {
	if err == nil {
		return nil
	}
	return connectError(complete(gzipError(err, d.limit)).GRPCStatus())
}
