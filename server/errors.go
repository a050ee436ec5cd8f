package server

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/grpc/codes"

	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/store"
)

// The answers of the handlers whose message is fixed, built once with their
// ErrorInfo (docs/api.md#reasons).
var (
	errAccountNotFound    = reason.Error(codes.NotFound, reason.NotFound, "account not found")
	errNoSubscription     = reason.Error(codes.NotFound, reason.NotFound, "no active subscription")
	errUsernameTaken      = reason.Error(codes.AlreadyExists, reason.AlreadyExists, "username already taken")
	errSubscriptionActive = reason.Error(codes.AlreadyExists, reason.AlreadyExists, "account already has an active subscription")
	errDeadline           = reason.Error(codes.DeadlineExceeded, reason.DeadlineExceeded, "deadline exceeded")
	errCanceled           = reason.Error(codes.Canceled, reason.ForCode(codes.Canceled), "request canceled")
	errDatabaseDown       = reason.Error(codes.Unavailable, reason.DatabaseUnavailable, "database unavailable")
	errInternal           = reason.Error(codes.Internal, reason.Internal, "internal error")
)

// errMsgs holds the answers a handler gives the store's sentinel errors, so
// that a 404 says what was not found.
type errMsgs struct {
	notFound error // for store.ErrNotFound
	conflict error // for store.ErrConflict
}

// errorRule is one row of the table from store errors to status errors.
type errorRule struct {
	err error // matched with errors.Is
	// answer returns the status error; nil means the handler did not
	// expect this error, which then falls through to the next rows.
	answer func(errMsgs) error
	// warn logs the error: the client gets no detail, the operator does.
	warn bool
}

// errorTable maps the errors the store returns to the codes of
// docs/api.md#errors, first match wins. Anything it does not match is
// Internal.
var errorTable = []errorRule{
	{err: store.ErrNotFound, answer: func(m errMsgs) error { return m.notFound }},
	{err: store.ErrConflict, answer: func(m errMsgs) error { return m.conflict }},
	{err: context.DeadlineExceeded, answer: fixed(errDeadline)},
	{err: context.Canceled, answer: fixed(errCanceled)},
	// Shed by the password hasher: its answer stands.
	{err: errHashBusy, answer: fixed(errHashBusy)},
	// Say what is wrong without the driver's text: the client should retry
	// later, not report a bug.
	{err: store.ErrUnavailable, answer: fixed(errDatabaseDown), warn: true},
}

func fixed(err error) func(errMsgs) error {
	return func(errMsgs) error { return err }
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
		answer := r.answer(msgs)
		if answer == nil {
			continue
		}
		if r.warn {
			m.log.WarnContext(ctx, "database unavailable", "op", op, "error", err)
		}
		return answer
	}
	m.log.ErrorContext(ctx, "internal error", "op", op, "error", err)
	return errInternal
}
