package server

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/store"
)

// errMsgs holds the messages a handler gives the store's sentinel errors, so
// that a 404 says what was not found.
type errMsgs struct {
	notFound string // for store.ErrNotFound
	conflict string // for store.ErrConflict
}

// errorRule is one row of the table from store errors to status codes.
type errorRule struct {
	err  error      // matched with errors.Is
	code codes.Code // the answer's code
	// msg returns the answer's message; "" means the handler did not
	// expect this error, which then falls through to the next rows.
	msg func(errMsgs) string
	// warn logs the error: the client gets no detail, the operator does.
	warn bool
}

// errorTable maps the errors the store returns to the codes of
// docs/api.md#errors, first match wins. Anything it does not match is
// Internal.
var errorTable = []errorRule{
	{err: store.ErrNotFound, code: codes.NotFound, msg: func(m errMsgs) string { return m.notFound }},
	{err: store.ErrConflict, code: codes.AlreadyExists, msg: func(m errMsgs) string { return m.conflict }},
	{err: context.DeadlineExceeded, code: codes.DeadlineExceeded, msg: fixed("deadline exceeded")},
	{err: context.Canceled, code: codes.Canceled, msg: fixed("request canceled")},
	// Shed by the password hasher: its message stands.
	{err: errHashBusy, code: codes.ResourceExhausted, msg: fixed(status.Convert(errHashBusy).Message())},
	// Say what is wrong without the driver's text: the client should retry
	// later, not report a bug.
	{err: store.ErrUnavailable, code: codes.Unavailable, msg: fixed("database unavailable"), warn: true},
}

func fixed(msg string) func(errMsgs) string {
	return func(errMsgs) string { return msg }
}

// errorMapper turns store errors into status errors. It is the one place that
// logs unexpected errors: the caller sees only "internal error".
type errorMapper struct {
	log *slog.Logger
}

// toStatus maps err to a status error through errorTable. op names the
// operation in the log line of an error the operator should see.
func (m errorMapper) toStatus(ctx context.Context, op string, err error, msgs errMsgs) error {
	for _, r := range errorTable {
		if !errors.Is(err, r.err) {
			continue
		}
		msg := r.msg(msgs)
		if msg == "" {
			continue
		}
		if r.warn {
			m.log.WarnContext(ctx, msg, "op", op, "error", err)
		}
		return status.Error(r.code, msg)
	}
	m.log.ErrorContext(ctx, "internal error", "op", op, "error", err)
	return status.Error(codes.Internal, "internal error")
}
