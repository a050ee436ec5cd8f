package server

import (
	"context"
	"errors"
	"log/slog"

	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/server/loginthrottle"
)

// The answers of the handlers to the store's sentinels, saying what was not
// found or exists; their code and reason are the error table's
// (interceptors/reason, docs/api.md#reasons).
var (
	errAccountNotFound    = reason.OutcomeNotFound.Error("account not found")
	errNoSubscription     = reason.OutcomeNotFound.Error("no active subscription")
	errUsernameTaken      = reason.OutcomeConflict.Error("username already taken")
	errSubscriptionActive = reason.OutcomeConflict.Error("account already has an active subscription")
)

// errorMapper turns store errors into status errors through the error table
// of interceptors/reason, which logs what the operator should see: the
// caller sees only "internal error" or "database unavailable".
type errorMapper struct {
	log *slog.Logger
}

// toStatus maps err to a status error. op names the operation in the log
// line of an error the operator should see; own holds the handler's answers
// to the sentinels it expects (nil fields: unexpected, so Internal).
func (m errorMapper) toStatus(ctx context.Context, op string, err error, own reason.Own) error {
	switch {
	case errors.Is(err, errHashBusy):
		// Shed by the password hasher: its answer stands.
		return errHashBusy
	case errors.Is(err, loginthrottle.ErrThrottled):
		// Refused by the login throttle: its answer stands.
		return loginthrottle.ErrThrottled
	case errors.Is(err, loginthrottle.ErrBusy):
		// Too many logins of one username wait for their turn to be
		// checked: shed as a full hashing queue is.
		return shedHashing(ctx)
	}
	return reason.Answer(ctx, m.log, op, err, own)
}
