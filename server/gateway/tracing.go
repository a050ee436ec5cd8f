package gateway

import (
	"net"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names the tracer of the REST server spans.
const tracerName = "github.com/shebasvc/sheba/server/gateway"

// serverSpans gives every request an HTTP server span, a child of the
// caller's span when the request carries W3C Trace Context (Baggage rides
// along), named "METHOD /route/template" (only the method for a path no
// route has), with the standard HTTP server attributes and http.route.
//
// It is ours rather than otelhttp's handler for a measured reason: otelhttp
// computes the span's attributes and the attribute set of its HTTP metrics
// on every request, sampled or not and with a no-op meter, and wraps the
// response writer twice. With tracing configured and a request not sampled
// (the common case under a ratio sampler), that was 12 of the 60 µs of CPU
// a REST ping cost (make bench, ping-rest). Here a request whose span does
// not record costs the Extract and the Start, and the attributes are built
// only for the spans that are kept.
func serverSpans(next http.Handler, tp trace.TracerProvider) http.Handler {
	tracer := tp.Tracer(tracerName)
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	// Made once: an option made per request is an allocation each.
	serverKind := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tracer.Start(ctx, r.Method, serverKind...)
		defer span.End()
		r = r.WithContext(ctx)
		if !span.IsRecording() {
			next.ServeHTTP(w, r)
			return
		}
		// The route the REST call found (newRESTCall). The attributes are
		// set in one call: the span grows its list on each.
		attrs := requestAttributes(r)
		if rc := restCallOf(ctx); rc != nil && rc.route != nil {
			span.SetName(rc.route.spanName)
			attrs = append(attrs, semconv.HTTPRoute(rc.route.template))
		}
		span.SetAttributes(attrs...)
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		code := sw.status
		if code == 0 {
			code = http.StatusOK
		}
		span.SetAttributes(semconv.HTTPResponseStatusCode(code))
		// A 4xx is the client's error, not the server's (semantic
		// conventions for HTTP server spans).
		if code >= http.StatusInternalServerError {
			span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(code)))
			span.SetStatus(otelcodes.Error, "")
		}
	})
}

// requestAttributes are the standard attributes of an HTTP server span that
// the request tells.
func requestAttributes(r *http.Request) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 10) // and http.route
	attrs = append(attrs,
		semconv.HTTPRequestMethodKey.String(r.Method),
		semconv.URLPath(r.URL.Path),
		semconv.URLScheme(scheme(r)),
		semconv.NetworkProtocolVersion(protocolVersion(r)),
	)
	if host, port, err := net.SplitHostPort(r.Host); err == nil {
		attrs = append(attrs, semconv.ServerAddress(host))
		if p, err := strconv.Atoi(port); err == nil {
			attrs = append(attrs, semconv.ServerPort(p))
		}
	} else if r.Host != "" {
		attrs = append(attrs, semconv.ServerAddress(r.Host))
	}
	if ip, port, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		attrs = append(attrs, semconv.ClientAddress(ip), semconv.NetworkPeerAddress(ip))
		if p, err := strconv.Atoi(port); err == nil {
			attrs = append(attrs, semconv.NetworkPeerPort(p))
		}
	}
	if ua := r.UserAgent(); ua != "" {
		attrs = append(attrs, semconv.UserAgentOriginal(ua))
	}
	return attrs
}

// protocolVersion is network.protocol.version: "1.1", "2"…, without
// making a string for the versions net/http serves.
func protocolVersion(r *http.Request) string {
	switch {
	case r.ProtoMajor == 1 && r.ProtoMinor == 1:
		return "1.1"
	case r.ProtoMajor == 2 && r.ProtoMinor == 0:
		return "2"
	case r.ProtoMajor == 1 && r.ProtoMinor == 0:
		return "1.0"
	}
	return strconv.Itoa(r.ProtoMajor) + "." + strconv.Itoa(r.ProtoMinor)
}

func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// statusWriter remembers the status code of the answer for the span.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= http.StatusOK {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer
// (deadlines, flushes).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
