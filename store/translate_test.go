package store

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestTranslateQueryCanceled checks that a statement cancelled by the
// server (the cancel request of an ended context, or statement_timeout)
// reads as context.DeadlineExceeded, not as an internal error.
func TestTranslateQueryCanceled(t *testing.T) {
	err := translate(&pgconn.PgError{Code: "57014", Message: "canceling statement due to statement timeout"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want context.DeadlineExceeded", err)
	}
}
