package gateway

import (
	"net/http"
	"time"
)

// ExtendWriteDeadline gives the answer being written on w another d to be
// written, from now: a streaming answer calls it before each write, so
// that http.write_timeout bounds each write, not the whole stream
// (docs/operations.md#slow-clients). It works on HTTP/1 and HTTP/2 alike,
// through any wrapper of w that has an Unwrap method; it returns
// http.ErrNotSupported when w cannot move its deadline.
func ExtendWriteDeadline(w http.ResponseWriter, d time.Duration) error {
	return http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
}
