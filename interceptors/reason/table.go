package reason

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"google.golang.org/grpc/codes"

	"github.com/shebasvc/sheba/store"
)

// Outcome is a row of the error table: something that happens to calls of
// several steps (the handlers, the interceptors, the REST gateway), which
// must answer it alike. The table says what a client sees of it; the steps
// only refer to it.
type Outcome uint8

// The outcomes, in the order Answer matches their errors.
const (
	// OutcomeNotFound is store.ErrNotFound: what the handler looked for
	// does not exist. The handler says what (OutcomeNotFound.Error).
	OutcomeNotFound Outcome = iota
	// OutcomeConflict is store.ErrConflict: what the handler would create
	// exists already. The handler says what.
	OutcomeConflict
	// OutcomeDeadline is context.DeadlineExceeded: the call's deadline
	// passed (the timeout interceptor answers it too).
	OutcomeDeadline
	// OutcomeCanceled is context.Canceled: the client went away.
	OutcomeCanceled
	// OutcomeDatabaseDown is store.ErrUnavailable: the database is down or
	// unreachable. The client should retry later, not report a bug.
	OutcomeDatabaseDown
	// OutcomeInternal is any error no other row names, panics included:
	// the client learns nothing of it, the operator everything.
	OutcomeInternal
	// OutcomeKeyReused is an idempotency key sent again with another
	// request: INVALID_ARGUMENT on gRPC, and 422 on REST as the IETF
	// Idempotency-Key draft says, for the request itself is well formed
	// (docs/api.md#idempotency-keys).
	OutcomeKeyReused
	// OutcomeETagMismatch is store.ErrETagMismatch: a conditional change
	// (AIP-154: a request's etag, or If-Match) found the resource at
	// another version, and changed nothing. ABORTED, as AIP-154 says: 409
	// on REST, and 412 when the condition came in an If-Match header, as
	// RFC 9110 §13.1.1 says (docs/api.md#etags).
	OutcomeETagMismatch

	numOutcomes
)

// Log says whether the operator sees a log line of an outcome, whose
// answer tells the client nothing of the error behind it.
type Log uint8

const (
	// NoLog: the answer says all there is to know.
	NoLog Log = iota
	// LogWarn: trouble the operator should know of, though no bug.
	LogWarn
	// LogError: a bug, or anything unexpected.
	LogError
)

// Row is what the table says of an outcome.
type Row struct {
	// Err is the error the outcome is, matched with errors.Is: a store
	// sentinel or a context error; nil for the outcomes a step names
	// itself (OutcomeInternal is anything else).
	Err    error
	Code   codes.Code
	Reason string
	// Message is the answer's message; "" when the step that answers
	// gives its own, saying what was not found or exists.
	Message string
	// Log is the operator's log line, of message Message.
	Log Log
	// HTTPStatus is the REST status when it is not the one of Code
	// (runtime.HTTPStatusFromCode), else 0.
	HTTPStatus int
	// IfMatchHTTPStatus is the REST status when the request carried an
	// If-Match header, if that changes it, else 0.
	IfMatchHTTPStatus int
}

// table is the error table, by outcome.
var table = [numOutcomes]Row{
	OutcomeNotFound:     {Err: store.ErrNotFound, Code: codes.NotFound, Reason: NotFound},
	OutcomeConflict:     {Err: store.ErrConflict, Code: codes.AlreadyExists, Reason: AlreadyExists},
	OutcomeDeadline:     {Err: context.DeadlineExceeded, Code: codes.DeadlineExceeded, Reason: DeadlineExceeded, Message: "deadline exceeded"},
	OutcomeCanceled:     {Err: context.Canceled, Code: codes.Canceled, Reason: Canceled, Message: "request canceled"},
	OutcomeDatabaseDown: {Err: store.ErrUnavailable, Code: codes.Unavailable, Reason: DatabaseUnavailable, Message: "database unavailable", Log: LogWarn},
	OutcomeInternal:     {Code: codes.Internal, Reason: Internal, Message: "internal error", Log: LogError},
	OutcomeKeyReused: {Code: codes.InvalidArgument, Reason: IdempotencyKeyReused,
		Message: "idempotency key already used with a different request", HTTPStatus: http.StatusUnprocessableEntity},
	OutcomeETagMismatch: {Err: store.ErrETagMismatch, Code: codes.Aborted, Reason: ETagMismatch,
		Message: "etag does not match the current one: the resource changed since it was read", IfMatchHTTPStatus: http.StatusPreconditionFailed},
}

// fixed holds the answers of the outcomes with a fixed message, built once:
// answering one costs no allocation.
var fixed = func() (answers [numOutcomes]error) {
	for o, r := range table {
		if r.Message != "" {
			answers[o] = Error(r.Code, r.Reason, r.Message)
		}
	}
	return answers
}()

// Row returns what the table says of o.
func (o Outcome) Row() Row { return table[o] }

// Err returns the answer of o with its fixed message, built once; nil for
// the outcomes whose message the step gives (use Error).
func (o Outcome) Err() error { return fixed[o] }

// Error returns an answer of o's code and reason with message msg. Build it
// once where the message is fixed.
func (o Outcome) Error(msg string) error { return Error(table[o].Code, table[o].Reason, msg) }

// Own holds a step's own answers to the outcomes whose message it gives,
// built once with Outcome.Error. A nil answer means the step does not
// expect the outcome: its error then answers as whatever else it is, and
// at last as OutcomeInternal.
type Own struct {
	NotFound error // of OutcomeNotFound
	Conflict error // of OutcomeConflict
}

// Answer returns the answer to err, an error from the store or the call's
// context that operation op met: that of the first outcome whose Err
// matches it, with the answers own gives, else OutcomeInternal's. When the
// outcome's row says so, it logs err with op to log (nil: no log), the one
// log line of it: the client sees none of its detail.
func Answer(ctx context.Context, log *slog.Logger, op string, err error, own Own) error {
	o, answer := OutcomeInternal, fixed[OutcomeInternal]
	for i, r := range table {
		if r.Err == nil || !errors.Is(err, r.Err) {
			continue
		}
		a := fixed[i]
		switch Outcome(i) {
		case OutcomeNotFound:
			a = own.NotFound
		case OutcomeConflict:
			a = own.Conflict
		}
		if a != nil {
			o, answer = Outcome(i), a
			break
		}
	}
	if log != nil {
		switch r := table[o]; r.Log {
		case LogWarn:
			log.WarnContext(ctx, r.Message, "op", op, "error", err)
		case LogError:
			log.ErrorContext(ctx, r.Message, "op", op, "error", err)
		}
	}
	return answer
}

// HTTPStatus returns the REST status of an error of reason r when the
// table gives it one other than its code's, and 0 otherwise. ifMatch says
// whether the request carried an If-Match header.
func HTTPStatus(r string, ifMatch bool) int {
	for _, row := range table {
		if row.Reason != r {
			continue
		}
		if ifMatch && row.IfMatchHTTPStatus != 0 {
			return row.IfMatchHTTPStatus
		}
		if row.HTTPStatus != 0 {
			return row.HTTPStatus
		}
	}
	return 0
}
