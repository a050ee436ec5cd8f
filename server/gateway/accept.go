package gateway

import (
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"

	"github.com/shebasvc/sheba/interceptors/reason"

	"github.com/shebasvc/sheba/codec/cborpb"
)

// unsupportedType answers 415 to a body of a type the gateway cannot
// decode, and reports whether it did.
func unsupportedType(gw *runtime.ServeMux, w http.ResponseWriter, r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	if r.ContentLength == 0 || supportedContentType(ct) {
		return false
	}
	// The answer's type comes from Accept alone: the gateway would
	// otherwise try (and log about) the unknown type.
	r.Header.Del("Content-Type")
	writeError(gw, w, r, &runtime.HTTPStatusError{
		HTTPStatus: http.StatusUnsupportedMediaType,
		Err: reason.Error(codes.InvalidArgument, reason.UnsupportedMediaType,
			fmt.Sprintf("unsupported content type %s: send application/json or application/cbor", reason.Quote(ct))),
	})
	return true
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

// supportedContentType reports whether the gateway can decode a body of
// this type. No type at all is taken as JSON.
func supportedContentType(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || mt == cborpb.MediaType)
}
