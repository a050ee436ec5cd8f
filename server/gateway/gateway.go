package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/shebasvc/sheba/codec/cborpb"
	"github.com/shebasvc/sheba/codec/httpcompress"
	"github.com/shebasvc/sheba/codec/protobound"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// requestCBORLimits bound the CBOR request bodies: no request message has a
// list or a map field, and none nests messages, so the smallest limits
// fxamacker/cbor allows leave room for every valid body, and a body of
// 100,000 items is refused while it is scanned, before it becomes a tree.
var requestCBORLimits = cborpb.DecodeLimits{MaxNesting: 4, MaxArrayElements: 16, MaxMapPairs: 16}

// Options configures the REST handler.
type Options struct {
	// MaxBodyBytes bounds a request body, as sent and after decompression:
	// 413 beyond it. From 1 to 64 MiB: New refuses others.
	MaxBodyBytes int64
	// MaxConcurrentBodies bounds the request bodies read and decoded at
	// once; a request that finds none free within a second is answered
	// 429.
	MaxConcurrentBodies int
	// WriteTimeout is http.write_timeout: an answer has that long to be
	// written from the end of its request's body, not only from its
	// headers as net/http counts it (0: net/http's count alone).
	WriteTimeout time.Duration
	// Authenticator is the chain's API-key check, asked before a body is
	// read: a request to a method that needs a key, without a valid one,
	// goes on without its body, which the chain then refuses (401).
	// Required.
	Authenticator Authenticator
	// CompressMinBytes is the smallest answer that is compressed for a
	// client that accepts gzip or zstd.
	CompressMinBytes int
	// ShareRequest puts each request's method, target, host and headers
	// where the chain reads them (callinfo.HTTP), and answers with the
	// headers the chain adds there: what the external hook needs of a REST
	// call. Off, no request pays for it.
	ShareRequest bool
	// TracerProvider, if not nil, gets an HTTP server span per request,
	// named by its route; nil leaves tracing out.
	TracerProvider trace.TracerProvider
	// GRPC, when not nil, serves the browser protocols (browser.go): the
	// ServeHTTP of a grpc.Server with the services behind the chain,
	// to which vanguard transcodes Connect and gRPC-Web calls at
	// POST /sheba.v1.<Service>/<Method>.
	GRPC http.Handler
	// ConnectHandlers serves the unary calls of the browser protocols by
	// connect-go's handlers, calling the services over conn on the request
	// goroutine (browserconnect.go), in place of vanguard and GRPC.
	ConnectHandlers bool
	// Codec decodes a protobuf request of the browser protocols into the
	// request the chain gets (server.Codec), with ConnectHandlers.
	Codec encoding.CodecV2
	// AllowedOrigins are the origins granted CORS (cors.go); empty: none,
	// and no CORS header is ever written.
	AllowedOrigins []string
	// MaxMessageBytes bounds the message of a browser call
	// (grpc.max_recv_bytes), as sent and after decompression, within
	// MaxBodyBytes: RESOURCE_EXHAUSTED beyond it. 0: MaxBodyBytes alone.
	MaxMessageBytes int64
	// RepeatedBounds bound the repeated fields of a browser call's
	// protobuf message: one over them is not unmarshalled here, and the
	// chain refuses it (server.CheckRequest). Nil: no bound.
	RepeatedBounds *protobound.Bounds
}

// varyAccept is the Vary of an answer that has none before the gateway's.
var varyAccept = []string{"Accept"}

// New returns the REST handler of the sheba.v1 API: grpc-gateway's mux
// calling the services over conn, so that every call passes the
// interceptor chain (and conn makes the call's metadata of the request's
// headers: headers.go), behind the HTTP guards that the package comment lists
// in their order: Accept negotiation between JSON and CBOR, the key before
// the body, 415 for a type it cannot decode, 400 for an Idempotency-Key it
// cannot pass on, 413 for a body over the limit, at most
// MaxConcurrentBodies bodies read at once, request decompression and answer
// compression.
func New(ctx context.Context, conn *Channel, o Options) (http.Handler, error) {
	if o.Authenticator == nil {
		return nil, errors.New("gateway: no Authenticator: the key must be checked before a body is read")
	}
	if o.MaxBodyBytes < 1 || o.MaxBodyBytes > maxBodyLimit {
		return nil, fmt.Errorf("gateway: MaxBodyBytes %d is not from 1 to %d (64 MiB)", o.MaxBodyBytes, maxBodyLimit)
	}
	// Every service of the method table has its REST routes.
	services := shebav1.Services
	routes, err := newRouteTable(services)
	if err != nil {
		return nil, err
	}
	jsonpb := protoJSON{&runtime.JSONPb{
		MarshalOptions: protojson.MarshalOptions{
			// Empty lists and strings are shown (an empty
			// nextPageToken marks the last page); unset messages
			// such as cancelTime stay absent.
			EmitDefaultValues: true,
		},
		UnmarshalOptions: protojson.UnmarshalOptions{
			// Unknown fields are a client's mistake: answer 400.
			DiscardUnknown: false,
		},
	}}
	bodies, err := newErrorBodiesCache()
	if err != nil {
		return nil, err
	}
	json := markingMarshaler{newErrorBodies(jsonpb, bodies)}
	// Boxed once: the rewriter below would box it on every answer.
	var jsonMarshaler runtime.Marshaler = json
	streamTypes, err := streamResponses(services)
	if err != nil {
		return nil, err
	}
	for i := range routes.routes {
		routes.routes[i].public = o.Authenticator.Public(routes.routes[i].rpc)
	}
	capture := &handlerCapture{}
	muxOpts := []runtime.ServeMuxOption{
		runtime.WithMarshalerOption(runtime.MIMEWildcard, json),
		// By name too, so that negotiateAccept can choose JSON for a
		// CBOR body.
		runtime.WithMarshalerOption("application/json", json),
		// CBOR for clients that ask for it (Content-Type or Accept), with
		// the JSON mapping's shape.
		runtime.WithMarshalerOption(cborpb.MediaType, markingMarshaler{newErrorBodies(&cborpb.Marshaler{Limits: requestCBORLimits}, bodies)}),
		// Server-Sent Events, which serveStream alone asks for.
		runtime.WithMarshalerOption(eventStreamType, sseMarshaler{json}),
		runtime.WithStreamErrorHandler(streamErrorHandler),
		runtime.WithIncomingHeaderMatcher(incomingHeader),
		runtime.WithOutgoingHeaderMatcher(outgoingHeader),
		runtime.WithErrorHandler(errorHandler),
		runtime.WithRoutingErrorHandler(routes.routingError),
		runtime.WithForwardResponseOption(writeETag),
		// A stream's shared messages (events) are written in the REST
		// encoding every stream shares; a unary answer is left as it is,
		// without looking for its call.
		runtime.WithForwardResponseRewriter(func(ctx context.Context, resp proto.Message) (any, error) {
			if !isStreamResponse(resp, streamTypes) {
				return resp, nil
			}
			return rewriteShared(ctx, resp, jsonMarshaler)
		}),
		// Each handler as it is registered (direct.go).
		runtime.WithMiddlewares(capture.middleware),
		// A form-encoded POST is not a GET in disguise: it is answered 415.
		runtime.WithDisablePathLengthFallback(),
	}
	if o.ShareRequest {
		// The chain's headers on a successful answer; the error handler
		// writes them on the others.
		muxOpts = append(muxOpts, runtime.WithForwardResponseOption(addChainHeaders))
	}
	// gw has every route, each service registered once; a request whose
	// route the table found goes to that route's handler (direct.go), and
	// gw routes the others.
	gw := runtime.NewServeMux(muxOpts...)
	for _, svc := range services {
		if err := svc.RegisterGateway(ctx, gw, conn); err != nil {
			return nil, fmt.Errorf("register gateway handler: %w", err)
		}
	}
	if err := capture.probeRoutes(ctx, gw, routes); err != nil {
		return nil, err
	}

	// The mux, with the 405s it cannot tell (routes.go) answered before
	// it, where it answers its own.
	mux := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := restCallOf(r.Context())
		if routes.misrouted(gw, w, r, rc) {
			return
		}
		// The request's metadata is the Channel's to make (headers.go).
		r = forMux(r)
		if serveRoute(w, r, rc) {
			return
		}
		gw.ServeHTTP(w, r)
	})
	// The bodies of keyed calls are decompressed within http.max_body_bytes;
	// those of public methods' calls without a key within their own bound,
	// and with a zstd window no larger (readPublicBody).
	codec, err := newCodec(markBodies(mux), gw, o.CompressMinBytes, o.MaxBodyBytes)
	if err != nil {
		return nil, err
	}
	publicCodec, err := newCodec(markBodies(mux), gw, o.CompressMinBytes, publicBodyBytes, httpcompress.WithMaxZstdWindow(publicBodyBytes))
	if err != nil {
		return nil, err
	}
	slots := newBodySlots(o.MaxConcurrentBodies, o.WriteTimeout)
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The answer is JSON or CBOR by Accept: caches must key on it.
		// Without a Vary yet (always, but for a handler in front), the
		// value is one slice shared by every answer, which nothing
		// changes in place: gzhttp's Vary: Accept-Encoding, when it adds
		// it, is appended to a copy (its capacity is its length).
		hdr := w.Header()
		if vary := hdr["Vary"]; len(vary) == 0 {
			hdr["Vary"] = varyAccept[:1:1]
		} else {
			hdr["Vary"] = append(slices.Clip(vary), "Accept")
		}
		if o.ShareRequest {
			r = shareRequest(r)
		}
		rc := restCallOf(r.Context())
		// Room for the request id that the call's answer carries, which
		// grpc-gateway adds to the header (and the error handler too):
		// an empty value, which writes no header line (net/http writes
		// each value of a header), with the room of one in the call's own
		// memory, so that the Add does not allocate it.
		if _, ok := hdr[requestIDHeader]; !ok && rc != nil {
			hdr[requestIDHeader] = rc.requestIDHeader[:0:1]
		}
		if isStream(rc) {
			serveStream(gw, mux, o.Authenticator, rc, w, r, o.WriteTimeout)
			return
		}
		negotiateAccept(r.Header)
		r, public := keyBeforeBody(o.Authenticator, rc, r)
		if unsupportedType(gw, w, r) || badIdempotencyKey(gw, w, r) {
			return
		}
		if public {
			// Within its own bound, without a slot.
			if readPublicBody(gw, w, r) {
				return
			}
			publicCodec.ServeHTTP(w, r)
			return
		}
		r, answered := limitBody(gw, w, r, o.MaxBodyBytes)
		if answered {
			return
		}
		r, release, answered := slots.acquire(gw, w, r)
		if answered {
			return
		}
		defer release()
		codec.ServeHTTP(w, r)
	})
	if o.TracerProvider != nil {
		h = serverSpans(h, o.TracerProvider)
	}
	// Outermost of the REST handler: the call's one lookup (newRESTCall).
	found := h
	h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, _ = newRESTCall(r, routes)
		found.ServeHTTP(w, r)
	})
	if o.GRPC != nil {
		// The browser protocols' spans are the grpc.Server's, as their
		// calls are its own, or made as it makes them (browserSpans).
		b, err := newBrowser(o.GRPC, conn, services, o, slots, gw)
		if err != nil {
			return nil, err
		}
		rest := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, browserPrefix) {
				b.ServeHTTP(w, r)
				return
			}
			rest.ServeHTTP(w, r)
		})
	}
	// Outermost: a preflight is answered before any key or limit.
	return withCORS(h, o.AllowedOrigins, services), nil
}

// newCodec returns next behind the request decompression and answer
// compression of codec/httpcompress, decompressing a body to at most
// maxBody bytes; its errors are written as the gateway's.
func newCodec(next http.Handler, gw *runtime.ServeMux, minBytes int, maxBody int64, opts ...httpcompress.Option) (http.Handler, error) {
	return httpcompress.NewHandler(next, append([]httpcompress.Option{
		httpcompress.WithMinBytes(minBytes),
		httpcompress.WithMaxRequestBytes(maxBody),
		httpcompress.WithErrorWriter(func(w http.ResponseWriter, r *http.Request, httpStatus int, msg string) {
			code, why := codes.InvalidArgument, reason.MalformedBody
			switch httpStatus {
			case http.StatusRequestEntityTooLarge:
				code, why = codes.ResourceExhausted, reason.BodyTooLarge
			case http.StatusUnsupportedMediaType:
				why = reason.UnsupportedContentEncoding
			}
			// The message may quote a header (Content-Encoding).
			writeError(gw, w, r, &runtime.HTTPStatusError{HTTPStatus: httpStatus, Err: reason.Error(code, why, reason.Clip(msg))})
		}),
	}, opts...)...)
}
