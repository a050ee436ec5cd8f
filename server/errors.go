package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"

	"github.com/jackc/pgx/v5/pgconn"
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

// errorMapper turns store errors into status errors. It is the one place that
// logs unexpected errors: the caller sees only "internal error".
type errorMapper struct {
	log *slog.Logger
}

// toStatus maps err to a status error with the code of contract §5. op names
// the operation in the log line of an unexpected error.
func (m errorMapper) toStatus(ctx context.Context, op string, err error, msgs errMsgs) error {
	var connectErr *pgconn.ConnectError
	switch {
	case errors.Is(err, store.ErrNotFound) && msgs.notFound != "":
		return status.Error(codes.NotFound, msgs.notFound)
	case errors.Is(err, store.ErrConflict) && msgs.conflict != "":
		return status.Error(codes.AlreadyExists, msgs.conflict)
	case errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request canceled")
	case errors.As(err, &connectErr) || connectionLost(err):
		// Say what is wrong without the driver's text: the client should
		// retry later, not report a bug.
		m.log.WarnContext(ctx, "database unavailable", "op", op, "error", err)
		return status.Error(codes.Unavailable, "database unavailable")
	default:
		m.log.ErrorContext(ctx, "internal error", "op", op, "error", err)
		return status.Error(codes.Internal, "internal error")
	}
}

// connectionLost reports whether err says the connection to the database
// broke (the server went away mid-query, or before the query was sent),
// rather than that the query failed.
func connectionLost(err error) bool {
	var netErr *net.OpError
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.As(err, &netErr) || pgconn.SafeToRetry(err)
}
