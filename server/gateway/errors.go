package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/grpclog"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/interceptors/retryafter"
)

// errRouteNotFound answers a path no route has.
var errRouteNotFound = &runtime.HTTPStatusError{
	HTTPStatus: http.StatusNotFound,
	Err:        reason.Error(codes.NotFound, reason.RouteNotFound, "Not Found"),
}

// errorHandler writes a google.rpc.Status body with the HTTP status of its
// code, or of its reason where the error table of package reason gives one
// (docs/api.md#errors). It is the REST side's
// central step for errors: the chain's errors come with their ErrorInfo
// (and RetryInfo) already; the ones the gateway makes itself get theirs
// here, with MALFORMED_BODY for a body the marshaler could not decode, and
// the message is made valid UTF-8 so the answer can always be marshaled.
//
// An error that no step of sheba made (a decoder's, grpc-gateway's: an
// unknown field, a query parameter or a Grpc-Timeout that does not parse)
// quotes the request at whatever length it was sent: its message is cut to
// reason.MaxQuoted bytes. It, and the gateway's own errors that quote the
// request, are answered without the error bodies cache, which holds only
// what no request text is in.
func errorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	err = overLimitError(r, err)
	httpStatus := 0
	if hse, ok := errors.AsType[*runtime.HTTPStatusError](err); ok {
		httpStatus, err = hse.HTTPStatus, hse.Err
	}
	if se, ours := err.(*reason.StatusError); !ours {
		err = clipMessage(err)
		m = uncached(m)
	} else if quotesRequest(se.Reason()) {
		m = uncached(m)
	}
	code := status.Code(err)
	byCode := httpStatus == 0
	if byCode {
		httpStatus = runtime.HTTPStatusFromCode(code)
	}
	def := ""
	if code == codes.InvalidArgument && bodyMalformed(r) {
		def = reason.MalformedBody
	}
	var retry time.Duration
	if httpStatus == http.StatusTooManyRequests || httpStatus == http.StatusServiceUnavailable {
		retry = time.Second
	}
	// The chain's errors come complete: this reads nothing of them again.
	se := reason.CompleteError(err, def, retry)
	// The error table knows the reasons whose REST status is not their
	// code's (IDEMPOTENCY_KEY_REUSED: 422; ETAG_MISMATCH under If-Match:
	// 412).
	if s := reason.HTTPStatus(se.Reason(), hasIfMatch(r)); s != 0 && byCode {
		httpStatus = s
	}
	// An answer relayed from the hook keeps the hook's status.
	if s := se.HTTPStatus(); s != 0 && byCode {
		httpStatus = s
	}
	ctx = withRefusedHeader(ctx)
	writeChainHeaders(ctx, w)
	if delay := se.Delay(); delay > 0 && !hasRetryAfter(ctx) {
		w.Header().Set(retryAfterHeader, strconv.FormatInt(retryafter.Seconds(delay), 10))
	}
	writeStatus(ctx, mux, m, w, r, httpStatus, se)
}

// writeStatus answers se with HTTP status httpStatus as
// runtime.DefaultHTTPErrorHandler does on the gateway's mux (whose
// outgoing header matcher is outgoingHeader, and whose response rewriter
// passes a google.rpc.Status as it is), the same headers and bytes, but
// from the error's own message (reason.StatusError.Proto), where
// DefaultHTTPErrorHandler copies the whole status (status.Status.Proto),
// details included: with its TE lookup (canonicalized on every call) that
// was 9 of the 18 allocations it made for a REST 400. A request that
// brings a TE header (trailers, which it may write), and a status the
// marshaler refuses (its 500), go DefaultHTTPErrorHandler's way.
func writeStatus(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int, se *reason.StatusError) {
	p := se.Proto()
	body, err := []byte(nil), error(nil)
	if len(r.Header["Te"]) == 0 {
		body, err = m.Marshal(p)
	}
	if body == nil || err != nil {
		runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, &runtime.HTTPStatusError{HTTPStatus: httpStatus, Err: se})
		return
	}
	h := w.Header()
	h.Del("Trailer")
	h.Del("Transfer-Encoding")
	h.Set("Content-Type", m.ContentType(p))
	if codes.Code(p.GetCode()) == codes.Unauthenticated {
		h.Set("WWW-Authenticate", p.GetMessage())
	}
	if md, ok := runtime.ServerMetadataFromContext(ctx); ok {
		for k, vs := range md.HeaderMD {
			if name, ok := outgoingHeader(k); ok {
				for _, v := range vs {
					h.Add(name, v)
				}
			}
		}
	}
	w.WriteHeader(httpStatus)
	if _, err := w.Write(body); err != nil {
		grpclog.Errorf("Failed to write response: %v", err)
	}
}

// withRefusedHeader returns ctx with the response metadata of a stream
// refused at its opening (restCall.refusedHeader) as the call's header
// metadata, which grpc-gateway leaves empty for a stream's error; ctx as it
// is for any other call.
func withRefusedHeader(ctx context.Context) context.Context {
	rc, ok := ctx.Value(restCallKey{}).(*restCall)
	if !ok || rc.refusedHeader == nil {
		return ctx
	}
	md, _ := runtime.ServerMetadataFromContext(ctx)
	if len(md.HeaderMD) > 0 {
		return ctx
	}
	md.HeaderMD = rc.refusedHeader
	return runtime.NewServerMetadataContext(ctx, md)
}

// clipMessage returns err with its message cut to reason.MaxQuoted bytes.
func clipMessage(err error) error {
	st := status.Convert(err)
	if len(st.Message()) <= reason.MaxQuoted {
		return err
	}
	p := st.Proto()
	p.Message = reason.Clip(p.GetMessage())
	return status.FromProto(p).Err()
}

// quotesRequest reports whether the gateway's own errors of reason r quote
// the request: the path (405), the Content-Type or Content-Encoding (415),
// a decompressor's complaint about the body.
func quotesRequest(r string) bool {
	switch r {
	case reason.MethodNotAllowed, reason.UnsupportedMediaType, reason.UnsupportedContentEncoding, reason.MalformedBody:
		return true
	}
	return false
}

// hasRetryAfter reports whether the call's response metadata holds a
// retry-after, which the gateway writes as the Retry-After header.
func hasRetryAfter(ctx context.Context) bool {
	md, ok := runtime.ServerMetadataFromContext(ctx)
	return ok && len(md.HeaderMD.Get(retryafter.Key)) > 0
}

// writeError answers err in the type the request's Accept asks for.
func writeError(gw *runtime.ServeMux, w http.ResponseWriter, r *http.Request, err error) {
	_, m := runtime.MarshalerForRequest(gw, r)
	errorHandler(r.Context(), gw, m, w, r, err)
}

// requestBody is the body the gateway's marshalers read; it remembers
// that decoding it failed, so the error handler can tell a malformed body
// (MALFORMED_BODY) from the gateway's other 400s (query parameters,
// Grpc-Timeout), which reach it as bare text.
type requestBody struct {
	io.ReadCloser
	malformed bool
}

// markBodies hands next the request body, if it has one, as a
// *requestBody.
func markBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !bodiless(r) {
			r.Body = &requestBody{ReadCloser: r.Body}
		}
		next.ServeHTTP(w, r)
	})
}

func bodyMalformed(r *http.Request) bool {
	b, ok := r.Body.(*requestBody)
	return ok && b.malformed
}

// markingMarshaler is a runtime.Marshaler whose decoders mark the
// requestBody they read when decoding fails.
type markingMarshaler struct {
	runtime.Marshaler
}

func (m markingMarshaler) NewDecoder(r io.Reader) runtime.Decoder {
	d := m.Marshaler.NewDecoder(r)
	b, ok := r.(*requestBody)
	if !ok {
		return d
	}
	return runtime.DecoderFunc(func(v any) error {
		err := d.Decode(v)
		if err != nil && !errors.Is(err, io.EOF) {
			b.malformed = true
		}
		return err
	})
}
