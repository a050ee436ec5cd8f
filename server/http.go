package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/gen/openapiv2"
	"github.com/shebasvc/sheba/server/cborpb"
	"github.com/shebasvc/sheba/server/httpcompress"
)

// httpHandler serves the operator endpoints of contract §3, which no key,
// limit or shedding ever touches, and everything else through the gateway.
func (s *Server) httpHandler(rest http.Handler, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /readyz", s.health.serveReadyz)
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, openapiv2.Document)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		// OpenMetrics carries the exemplars (trace ids) of the histograms.
		EnableOpenMetrics: true,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}))
	mux.Handle("/", rest)
	return mux
}

// restHandler guards the gateway: it answers 415 to a body it cannot decode
// and 413 to one over maxBody bytes (compressed or not), before any handler
// runs; it decompresses request bodies and compresses answers of at least
// minBytes for clients that accept it. It names the route of the request on
// its span (http.route).
func restHandler(gw *runtime.ServeMux, routes *routeTable, maxBody int64, minBytes int) (http.Handler, error) {
	codec, err := httpcompress.NewHandler(gw,
		httpcompress.WithMinBytes(minBytes),
		httpcompress.WithMaxRequestBytes(maxBody),
		httpcompress.WithErrorWriter(func(w http.ResponseWriter, r *http.Request, httpStatus int, msg string) {
			code := codes.InvalidArgument
			if httpStatus == http.StatusRequestEntityTooLarge {
				code = codes.ResourceExhausted
			}
			writeError(gw, w, r, &runtime.HTTPStatusError{HTTPStatus: httpStatus, Err: status.Error(code, msg)})
		}),
	)
	if err != nil {
		return nil, err
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The answer is JSON or CBOR by Accept: caches must key on it.
		w.Header().Add("Vary", "Accept")
		negotiateAccept(r.Header)
		if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
			if route := routes.template(r.Method, r.URL.Path); route != "" {
				span.SetAttributes(semconv.HTTPRoute(route))
			}
		}
		if ct := r.Header.Get("Content-Type"); r.ContentLength != 0 && !supportedContentType(ct) {
			// The answer's type comes from Accept alone: the gateway
			// would otherwise try (and log about) the unknown type.
			r.Header.Del("Content-Type")
			writeError(gw, w, r, &runtime.HTTPStatusError{
				HTTPStatus: http.StatusUnsupportedMediaType,
				Err:        status.Errorf(codes.InvalidArgument, "unsupported content type %q: send application/json or application/cbor", ct),
			})
			return
		}
		if r.ContentLength > maxBody {
			writeError(gw, w, r, errBodyTooLarge(maxBody))
			return
		}
		if r.ContentLength != 0 {
			lb := &limitedBody{ReadCloser: http.MaxBytesReader(w, r.Body, maxBody), limit: maxBody}
			r = r.WithContext(context.WithValue(r.Context(), limitedBodyKey{}, lb))
			r.Body = lb
		}
		codec.ServeHTTP(w, r)
	}), nil
}

// negotiateAccept sets the Accept header to the one media type the answer
// is to be in. The gateway matches Accept values literally and otherwise
// answers in the request body's type, so it would answer CBOR to
// "Accept: application/json" on a CBOR body, and JSON to
// "application/cbor, */*;q=0.1". Of JSON and CBOR, the one of higher
// q-value wins; on a tie, or when only a wildcard names them, the answer is
// in the body's type; an Accept of nothing sheba speaks gets JSON. Without
// an Accept header the gateway's choice (the body's type) stands.
func negotiateAccept(h http.Header) {
	values := h.Values("Accept")
	if len(values) == 0 {
		return
	}
	qJSON, qCBOR, qAny := -1.0, -1.0, -1.0
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			mt, params, err := mime.ParseMediaType(part)
			if err != nil {
				continue
			}
			q := 1.0
			if s, ok := params["q"]; ok {
				if q, err = strconv.ParseFloat(s, 64); err != nil {
					continue
				}
			}
			switch mt {
			case "application/json":
				qJSON = max(qJSON, q)
			case cborpb.MediaType:
				qCBOR = max(qCBOR, q)
			case "*/*", "application/*":
				qAny = max(qAny, q)
			}
		}
	}
	answer := "application/json"
	switch {
	case qCBOR > 0 && qCBOR > qJSON:
		answer = cborpb.MediaType
	case qJSON > 0 && qJSON > qCBOR:
		// JSON, even for a CBOR body.
	case max(qJSON, qCBOR, qAny) > 0:
		if mt, _, err := mime.ParseMediaType(h.Get("Content-Type")); err == nil && mt == cborpb.MediaType {
			answer = cborpb.MediaType
		}
	}
	h.Set("Accept", answer)
}

func writeError(gw *runtime.ServeMux, w http.ResponseWriter, r *http.Request, err error) {
	_, m := runtime.MarshalerForRequest(gw, r)
	runtime.DefaultHTTPErrorHandler(r.Context(), gw, m, w, r, err)
}

// supportedContentType reports whether the gateway can decode a body of
// this type. No type at all is taken as JSON.
func supportedContentType(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || mt == cborpb.MediaType)
}

// limitedBody remembers that the body went over its limit, so the error
// handler can answer 413 where the gateway's decoder saw only a read error.
type limitedBody struct {
	io.ReadCloser
	limit int64
	over  atomic.Bool
}

type limitedBodyKey struct{}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		b.over.Store(true)
	}
	return n, err
}

// bodyOverLimit reports whether the request body of ctx went over its limit,
// and the limit.
func bodyOverLimit(ctx context.Context) (int64, bool) {
	b, ok := ctx.Value(limitedBodyKey{}).(*limitedBody)
	if !ok || !b.over.Load() {
		return 0, false
	}
	return b.limit, true
}
