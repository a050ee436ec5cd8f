package reason

import (
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Domain is the ErrorInfo domain of every reason below.
const Domain = "sheba"

// The reasons, by the step that decides them. docs/api.md#reasons lists
// them with their codes; keep the two together. What several steps answer
// alike (the store's sentinels, a deadline, the database down) is in the
// error table of table.go.
const (
	// Authentication (interceptors/apikey) and Login.
	APIKeyMissing  = "API_KEY_MISSING" // UNAUTHENTICATED: no key on a method that needs one
	APIKeyInvalid  = "API_KEY_INVALID" // UNAUTHENTICATED: an unknown key, or a malformed authorization
	LoginFailed    = "LOGIN_FAILED"    // UNAUTHENTICATED: Login with an unknown user or a wrong password
	LoginThrottled = "LOGIN_THROTTLED" // RESOURCE_EXHAUSTED: Login for a username with limits.login_failures.max failures in its window; with RetryInfo

	// Admission (interceptors/ratelimit, concurrency, failfast, timeout).
	RateLimited         = "RATE_LIMITED"         // RESOURCE_EXHAUSTED: the global rate limit
	KeyRateLimited      = "KEY_RATE_LIMITED"     // RESOURCE_EXHAUSTED: the caller's per-key rate limit
	Overloaded          = "OVERLOADED"           // RESOURCE_EXHAUSTED: limits.max_inflight calls already run
	DatabaseUnavailable = "DATABASE_UNAVAILABLE" // UNAVAILABLE: the database is down or unreachable
	DeadlineExceeded    = "DEADLINE_EXCEEDED"    // DEADLINE_EXCEEDED: the call's deadline passed

	// Streams (concurrency.StreamServerInterceptor: health Watch and
	// reflection streams; the event streams' own limits, internal/app).
	TooManyStreams = "TOO_MANY_STREAMS" // RESOURCE_EXHAUSTED: the streams that limit allows are open already; with RetryInfo

	// The event stream (server/event.go).
	EventCursorExpired = "EVENT_CURSOR_EXPIRED" // OUT_OF_RANGE (400): after_event_id names no position the service keeps
	StreamTooSlow      = "STREAM_TOO_SLOW"      // RESOURCE_EXHAUSTED: the client did not read and events.buffer events waited for it
	StreamEnded        = "STREAM_ENDED"         // UNAVAILABLE: the stream ran events.max_duration; resume after its last id or cursor

	// Idempotency keys (interceptors/idempotency).
	IdempotencyKeyReused = "IDEMPOTENCY_KEY_REUSED" // INVALID_ARGUMENT (422 on REST): the key came with another request
	IdempotencyKeyInUse  = "IDEMPOTENCY_KEY_IN_USE" // ABORTED (409): the first request with the key still runs; with RetryInfo

	// The handlers (server/).
	InvalidArgument = "INVALID_ARGUMENT" // INVALID_ARGUMENT: input breaks a rule; see the BadRequest detail
	NotFound        = "NOT_FOUND"        // NOT_FOUND: no such resource
	AlreadyExists   = "ALREADY_EXISTS"   // ALREADY_EXISTS: the resource exists already
	Internal        = "INTERNAL"         // INTERNAL: anything unexpected, panics included
	Canceled        = "CANCELED"         // CANCELED: the client went away (it does not see the answer)
	ETagMismatch    = "ETAG_MISMATCH"    // ABORTED (409; 412 under If-Match): a conditional change found the resource changed since its etag was read

	// Webhook endpoints (server/webhook.go).
	WebhookURLNotAllowed = "WEBHOOK_URL_NOT_ALLOWED" // INVALID_ARGUMENT: the URL's host or port is not a public target
	WebhookEndpointLimit = "WEBHOOK_ENDPOINT_LIMIT"  // FAILED_PRECONDITION (400): the key holds webhooks.max_endpoints endpoints

	// The REST gateway (server/gateway), before any method runs.
	RouteNotFound              = "ROUTE_NOT_FOUND"              // NOT_FOUND (404): no route has this path
	MethodNotAllowed           = "METHOD_NOT_ALLOWED"           // UNIMPLEMENTED (405): the path exists under other methods
	UnsupportedMediaType       = "UNSUPPORTED_MEDIA_TYPE"       // INVALID_ARGUMENT (415): a Content-Type other than JSON or CBOR
	UnsupportedContentEncoding = "UNSUPPORTED_CONTENT_ENCODING" // INVALID_ARGUMENT (415): a Content-Encoding other than gzip or zstd
	BodyTooLarge               = "BODY_TOO_LARGE"               // RESOURCE_EXHAUSTED (413): a body over http.max_body_bytes; a gRPC, Connect or gRPC-Web message over grpc.max_recv_bytes
	MalformedBody              = "MALFORMED_BODY"               // INVALID_ARGUMENT (400): a body that cannot be decompressed or decoded
	NotAcceptable              = "NOT_ACCEPTABLE"               // INVALID_ARGUMENT (406): a stream asked for as application/cbor

	// The external request hook (interceptors/hook).
	HookDenied      = "HOOK_DENIED"      // the code of the hook's status (403 PERMISSION_DENIED, …; REST: that status): the hook broke the call; metadata "reason" holds the hook's reason
	HookUnavailable = "HOOK_UNAVAILABLE" // UNAVAILABLE: a hook call failed under failure_mode closed; with RetryInfo
)

// HookReasonKey is the key of the ErrorInfo metadata of a HOOK_DENIED error
// that holds the reason the hook gave.
const HookReasonKey = "reason"

// The reasons of codes no step names more precisely.
var byCode = [...]string{
	codes.OK:                 "",
	codes.Canceled:           Canceled,
	codes.Unknown:            "UNKNOWN",
	codes.InvalidArgument:    InvalidArgument,
	codes.DeadlineExceeded:   DeadlineExceeded,
	codes.NotFound:           NotFound,
	codes.AlreadyExists:      AlreadyExists,
	codes.PermissionDenied:   "PERMISSION_DENIED",
	codes.ResourceExhausted:  "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION",
	codes.Aborted:            "ABORTED",
	codes.OutOfRange:         "OUT_OF_RANGE",
	codes.Unimplemented:      "UNIMPLEMENTED",
	codes.Internal:           Internal,
	codes.Unavailable:        "UNAVAILABLE",
	codes.DataLoss:           "DATA_LOSS",
	codes.Unauthenticated:    "UNAUTHENTICATED",
}

// ForCode returns the reason of an error of code c that names none itself:
// the code's name in UPPER_SNAKE ("NOT_FOUND").
func ForCode(c codes.Code) string {
	if int(c) < len(byCode) {
		return byCode[c]
	}
	return "UNKNOWN"
}

// Status returns a status of code c and message msg whose details are
// ErrorInfo{Domain, reason} followed by details. Build it once where the
// message is fixed. Text in msg that is not valid UTF-8 is replaced; a
// detail that cannot be marshaled (invalid UTF-8 in a string field) is left
// out, so the status stays answerable.
func Status(c codes.Code, reason, msg string, details ...proto.Message) *status.Status {
	return statusWith(c, reason, msg, nil, details)
}

// statusWith is Status with metadata in the ErrorInfo; metadata that
// cannot be marshaled (invalid UTF-8) is left out.
func statusWith(c codes.Code, reason, msg string, metadata map[string]string, details []proto.Message) *status.Status {
	return status.FromProto(statusProto(c, reason, msg, metadata, details))
}

// statusProto is statusWith's status as a message.
func statusProto(c codes.Code, reason, msg string, metadata map[string]string, details []proto.Message) *spb.Status {
	p := &spb.Status{Code: int32(c), Message: ValidUTF8(msg)}
	p.Details = make([]*anypb.Any, 0, 1+len(details))
	info, err := anypb.New(&errdetails.ErrorInfo{Reason: reason, Domain: Domain, Metadata: metadata})
	if err != nil {
		info = mustAny(&errdetails.ErrorInfo{Reason: reason, Domain: Domain})
	}
	p.Details = append(p.Details, info)
	for _, d := range details {
		if a, err := anypb.New(d); err == nil {
			p.Details = append(p.Details, a)
		}
	}
	return p
}

// Error returns Status(c, reason, msg) as a *StatusError.
func Error(c codes.Code, reason, msg string, details ...proto.Message) error {
	return newError(statusProto(c, reason, msg, nil, details), reason, 0, details)
}

// ErrorFor is Error with metadata in the ErrorInfo, answered on REST with
// httpStatus rather than the status of c (0: c's): an answer relayed from
// another service, whose status sheba keeps (HOOK_DENIED).
func ErrorFor(c codes.Code, reason, msg string, metadata map[string]string, httpStatus int) error {
	return newError(statusProto(c, reason, msg, metadata, nil), reason, httpStatus, nil)
}

// newError returns the error of p, which it keeps as the error's Proto.
func newError(p *spb.Status, reason string, httpStatus int, details []proto.Message) *StatusError {
	st := status.FromProto(p)
	e := &StatusError{st: st, p: p, reason: reason, httpStatus: httpStatus, complete: !Retryable(st.Code())}
	for _, d := range details {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			e.delay = ri.GetRetryDelay().AsDuration()
		}
	}
	return e
}

// StatusError is an error made by Error or completed by CompleteError. It
// carries its reason and retry delay in the clear, so the steps that act on
// them (the REST status of a reason, the Retry-After header) need not
// decode the status's details: every read of a status's details copies the
// whole status (four copies on the REST error path before this type).
type StatusError struct {
	st *status.Status
	// p is the message st was made of, when the error was (newError),
	// never changed after.
	p      *spb.Status
	reason string
	delay  time.Duration
	// httpStatus is the REST status, when it is not the code's (0).
	httpStatus int
	// complete: Complete would change nothing (every status of a
	// non-retryable code made by Status, and every completed one).
	complete bool
}

func (e *StatusError) Error() string { return e.st.Err().Error() }

// GRPCStatus returns the status: status.FromError and status.Code read it.
func (e *StatusError) GRPCStatus() *status.Status { return e.st }

// Proto returns the status as a message, to be read and never changed:
// the one it was made of where the error has it (Error, ErrorFor), else a
// copy. status.Status's Proto copies the whole status, details included,
// on every call: the REST error handler reads it here instead.
func (e *StatusError) Proto() *spb.Status {
	if e.p != nil {
		return e.p
	}
	return e.st.Proto()
}

// Reason returns the reason of the status's ErrorInfo ("" if it has none).
func (e *StatusError) Reason() string { return e.reason }

// HTTPStatus returns the REST status of the error when it is not the one
// of its code, else 0.
func (e *StatusError) HTTPStatus() int { return e.httpStatus }

// Is reports whether target is an error of the same status.
func (e *StatusError) Is(target error) bool {
	if t, ok := target.(*StatusError); ok {
		target = t.st.Err()
	}
	return errors.Is(e.st.Err(), target)
}

// CompleteError is Complete for an error: it returns err's status completed,
// with its reason and retry delay. An err that is a complete *StatusError
// already is returned as it is, without reading its status again.
func CompleteError(err error, def string, retry time.Duration) *StatusError {
	se, _ := err.(*StatusError)
	if se != nil && se.complete {
		return se
	}
	st, delay := Complete(status.Convert(err), def, retry)
	var r string
	httpStatus := 0
	if se != nil {
		r, httpStatus = se.reason, se.httpStatus
	} else {
		r = Of(st)
	}
	return &StatusError{st: st, reason: r, delay: delay, httpStatus: httpStatus, complete: true}
}

// Delay returns the retry delay of the status's RetryInfo (0 if none).
func (e *StatusError) Delay() time.Duration { return e.delay }

// The type URLs of the details Complete looks for.
const (
	errorInfoURL = "type.googleapis.com/google.rpc.ErrorInfo"
	retryInfoURL = "type.googleapis.com/google.rpc.RetryInfo"
)

// Retryable reports whether an error of code c tells the client to retry
// later, and so carries RetryInfo: RESOURCE_EXHAUSTED (429) and
// UNAVAILABLE (503).
func Retryable(c codes.Code) bool {
	return c == codes.ResourceExhausted || c == codes.Unavailable
}

// Complete returns st with what every error of sheba carries, adding only
// what is missing:
//
//   - an ErrorInfo with reason def (ForCode of its code when def is ""),
//     unless st has one;
//   - a RetryInfo of retry, when retry is positive and st has none;
//   - a message that is valid UTF-8.
//
// It also returns the delay of st's RetryInfo, the one it had or the one
// added, or 0 when it carries none: the retry-after header must say the
// same. An OK status is returned as it is.
func Complete(st *status.Status, def string, retry time.Duration) (*status.Status, time.Duration) {
	if st.Code() == codes.OK {
		return st, 0
	}
	p := st.Proto()
	changed := false
	hasInfo := false
	var delay time.Duration
	hasRetry := false
	for _, d := range p.GetDetails() {
		switch d.GetTypeUrl() {
		case errorInfoURL:
			hasInfo = true
		case retryInfoURL:
			var ri errdetails.RetryInfo
			if d.UnmarshalTo(&ri) == nil {
				hasRetry = true
				delay = ri.GetRetryDelay().AsDuration()
			}
		}
	}
	if !hasInfo {
		if def == "" {
			def = ForCode(st.Code())
		}
		// ErrorInfo first, as Status puts it.
		p.Details = append([]*anypb.Any{mustAny(&errdetails.ErrorInfo{Reason: def, Domain: Domain})}, p.Details...)
		changed = true
	}
	if !hasRetry && retry > 0 {
		p.Details = append(p.Details, mustAny(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}))
		delay = retry
		changed = true
	}
	if !utf8.ValidString(p.GetMessage()) {
		p.Message = ValidUTF8(p.GetMessage())
		changed = true
	}
	if !changed {
		return st, delay
	}
	return status.FromProto(p), delay
}

// Of returns the reason of st's ErrorInfo, or "" if it has none.
func Of(st *status.Status) string {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// ValidUTF8 returns s with every byte sequence that is not valid UTF-8
// replaced by U+FFFD. Text from a request goes through it (or %q) before it
// enters an error: protojson and CBOR refuse to marshal invalid UTF-8, and
// the error would become a 500.
func ValidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// MaxQuoted is the most bytes of text taken from a request that an error
// message quotes (docs/api.md#errors): an unknown field name, a bad value,
// a header. Longer text is cut, so that no error answer grows with what was
// sent.
const MaxQuoted = 256

// Quote returns s quoted as %q quotes it (so bytes that are not UTF-8 are
// escaped), cut to its first MaxQuoted bytes; a cut is marked by "…" after
// the closing quote. Text from a request that a step puts in an error
// message goes through it.
func Quote(s string) string {
	if len(s) <= MaxQuoted {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:cut(s)]) + "…"
}

// Clip returns s cut to its first MaxQuoted bytes, "…" marking a cut: for a
// message a library made from the request (a decoder's, grpc-gateway's),
// whose quotes sheba does not make. It does not make s valid UTF-8
// (ValidUTF8 does).
func Clip(s string) string {
	if len(s) <= MaxQuoted {
		return s
	}
	return s[:cut(s)] + "…"
}

// cut returns where to cut s, longer than MaxQuoted: at MaxQuoted bytes, or
// a little before, at the start of the rune that would have been split.
func cut(s string) int {
	n := MaxQuoted
	for i := n; i > n-utf8.UTFMax && i > 0; i-- {
		if utf8.RuneStart(s[i]) {
			return i
		}
	}
	return n
}

// mustAny wraps a detail that always marshals (no strings from a request).
func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic("reason: marshal " + string(m.ProtoReflect().Descriptor().FullName()) + ": " + err.Error())
	}
	return a
}
