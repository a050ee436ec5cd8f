package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"

	"github.com/shebasvc/sheba/interceptors/reason"
)

// The body limit: a request body over maxBody bytes, as sent or after
// decompression (codec/httpcompress enforces the latter), is answered 413
// with a Status of code ResourceExhausted, before any handler runs. This
// file holds every part of that rule.

// maxBodyLimit is the most MaxBodyBytes may be, as http.max_body_bytes may
// (config/validate.go): 64 MiB, far above any request of the API, and
// small enough that a body of it, a frame added to it, its base64 length
// and vanguard's uint32 buffer of it (browser.go) are all exact.
const maxBodyLimit = 64 << 20

// limitBody answers 413 to a request whose declared length is over maxBody,
// and reports whether it did; otherwise it bounds the body it reads to
// maxBody bytes and remembers in the context if a read went over.
func limitBody(gw *runtime.ServeMux, w http.ResponseWriter, r *http.Request, maxBody int64) (*http.Request, bool) {
	if r.ContentLength > maxBody {
		writeError(gw, w, r, errBodyTooLarge(maxBody))
		return r, true
	}
	if r.ContentLength != 0 {
		lb := &limitedBody{ReadCloser: http.MaxBytesReader(w, r.Body, maxBody), limit: maxBody}
		r = r.WithContext(context.WithValue(r.Context(), limitedBodyKey{}, lb))
		r.Body = lb
	}
	return r, false
}

func errBodyTooLarge(limit int64) error {
	return &runtime.HTTPStatusError{HTTPStatus: http.StatusRequestEntityTooLarge, Err: bodyTooLarge(limit)}
}

// bodyTooLarge is the error of a body over limit bytes, without its HTTP
// status: the browser protocols answer it by their own mapping.
func bodyTooLarge(limit int64) error {
	return reason.Error(codes.ResourceExhausted, reason.BodyTooLarge, fmt.Sprintf("request body larger than %d bytes", limit))
}

// overLimitError turns the error of a request whose body went over its
// limit into the 413 (the gateway's decoder reports a read error, which it
// would answer 400); any other error is returned as it is.
func overLimitError(r *http.Request, err error) error {
	if limit, over := bodyOverLimit(r.Context()); over {
		return errBodyTooLarge(limit)
	}
	return err
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
	// Looked into only on an error: errors.As took the address of a
	// variable that then lived on the heap, one allocation a read.
	if err != nil {
		if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
			b.over.Store(true)
		}
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
