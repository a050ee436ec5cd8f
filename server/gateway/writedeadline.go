package gateway

import (
	"net/http"
	"time"
)

// ExtendWriteDeadline gives the answer being written on w another d to be
// written, from now. net/http counts http.write_timeout from the request's
// headers; the gateway calls this once a keyed request's body is read, so
// that the answer has the whole timeout again from then
// (docs/operations.md#slow-clients). A streaming answer would call it
// before each write, so that the timeout bounds each write rather than the
// whole stream. It works on HTTP/1 and HTTP/2 alike, through any wrapper of
// w that has an Unwrap method; it returns http.ErrNotSupported when w
// cannot move its deadline.
func ExtendWriteDeadline(w http.ResponseWriter, d time.Duration) error {
	return http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
}
