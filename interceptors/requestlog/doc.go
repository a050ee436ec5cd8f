// Package requestlog gives every call a request id and writes one log line
// when it ends.
//
// The request id is the caller's x-request-id (metadata or HTTP header) when
// it is a sane token (1 to 128 printable ASCII characters), else a new random
// one; it is sent back as x-request-id response metadata (the REST gateway
// makes it a header) and rides in the context (callinfo) for every log line
// of the call.
//
// It must be the outermost interceptor, so that its line sees the final
// code of every call, rejections and recovered panics included, and it puts
// the callinfo.Info that inner steps fill in (the caller id). The line has
// method, transport, code, duration, request_id, trace_id, span_id,
// api_key_id and peer; never request bodies, passwords or keys. It is at
// Info level, or Warn for the codes that mean the server failed (Internal,
// Unknown, DataLoss, Unavailable, DeadlineExceeded) unless WithPlannedEnds
// says the error ended the call as planned.
//
// The line goes to the logger's handler as a slog.Record, except on a
// JSONHandler of this package (slog's JSON handler, as sheba's serve
// builds it): there it is appended directly, in the same bytes, for a
// fraction of slog's cost.
//
// It returns no codes of its own.
package requestlog
