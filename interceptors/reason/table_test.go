package reason_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/store"
)

// equateErrors compares the Err of rows by identity: a row is the
// sentinel it names, not one that looks alike.
var equateErrors = cmp.Comparer(func(a, b error) bool { return a == b })

// TestTable checks every row of the error table: what a client sees of
// each outcome is docs/api.md#reasons.
func TestTable(t *testing.T) {
	for _, test := range []struct {
		name    string
		outcome reason.Outcome
		want    reason.Row
	}{
		{"not found", reason.OutcomeNotFound, reason.Row{Err: store.ErrNotFound, Code: codes.NotFound, Reason: "NOT_FOUND"}},
		{"conflict", reason.OutcomeConflict, reason.Row{Err: store.ErrConflict, Code: codes.AlreadyExists, Reason: "ALREADY_EXISTS"}},
		{"deadline", reason.OutcomeDeadline, reason.Row{Err: context.DeadlineExceeded, Code: codes.DeadlineExceeded, Reason: "DEADLINE_EXCEEDED",
			Message: "deadline exceeded"}},
		{"canceled", reason.OutcomeCanceled, reason.Row{Err: context.Canceled, Code: codes.Canceled, Reason: "CANCELED",
			Message: "request canceled"}},
		{"database down", reason.OutcomeDatabaseDown, reason.Row{Err: store.ErrUnavailable, Code: codes.Unavailable, Reason: "DATABASE_UNAVAILABLE",
			Message: "database unavailable", Log: reason.LogWarn}},
		{"internal", reason.OutcomeInternal, reason.Row{Code: codes.Internal, Reason: "INTERNAL",
			Message: "internal error", Log: reason.LogError}},
		{"key reused", reason.OutcomeKeyReused, reason.Row{Code: codes.InvalidArgument, Reason: "IDEMPOTENCY_KEY_REUSED",
			Message: "idempotency key already used with a different request", HTTPStatus: http.StatusUnprocessableEntity}},
		{"etag mismatch", reason.OutcomeETagMismatch, reason.Row{Err: store.ErrETagMismatch, Code: codes.Aborted, Reason: "ETAG_MISMATCH",
			Message: "etag does not match the current one: the resource changed since it was read", IfMatchHTTPStatus: http.StatusPreconditionFailed}},
	} {
		t.Run(test.name, func(t *testing.T) {
			if diff := cmp.Diff(test.want, test.outcome.Row(), equateErrors); diff != "" {
				t.Errorf("row (-want +got):\n%s", diff)
			}
			// The answer with the fixed message is exactly code,
			// message and one ErrorInfo: the bytes a client gets.
			err := test.outcome.Err()
			if test.want.Message == "" {
				if err != nil {
					t.Errorf("Err: got %v, want nil for an outcome whose message the step gives", err)
				}
				err = test.outcome.Error("the step's message")
				test.want.Message = "the step's message"
			}
			if diff := cmp.Diff(wire(test.want.Code, test.want.Reason, test.want.Message), status.Convert(err).Proto(), protocmp.Transform()); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
			// Complete adds nothing but the RetryInfo of a retryable code.
			var retry time.Duration
			if reason.Retryable(test.want.Code) {
				retry = time.Second
			}
			if got := reason.CompleteError(err, "", retry); got.Reason() != test.want.Reason || got.Delay() != retry {
				t.Errorf("completed: got reason %q delay %v, want %q %v", got.Reason(), got.Delay(), test.want.Reason, retry)
			}
		})
	}
}

// wire returns the google.rpc.Status of code c, message msg and an
// ErrorInfo of reason r.
func wire(c codes.Code, r, msg string) *spb.Status {
	info, err := anypb.New(&errdetails.ErrorInfo{Reason: r, Domain: reason.Domain})
	if err != nil {
		panic(err)
	}
	return &spb.Status{Code: int32(c), Message: msg, Details: []*anypb.Any{info}}
}

// TestAnswer checks that an error from the store or a context gets the
// answer of its outcome, with the step's own answers, and the log line its
// row asks for.
func TestAnswer(t *testing.T) {
	accountNotFound := reason.OutcomeNotFound.Error("account not found")
	usernameTaken := reason.OutcomeConflict.Error("username already taken")
	own := reason.Own{NotFound: accountNotFound, Conflict: usernameTaken}
	for _, test := range []struct {
		name      string
		err       error
		own       reason.Own
		want      error
		wantLevel string // of the log line, "" for none
	}{
		{"not found, expected", store.ErrNotFound, own, accountNotFound, ""},
		{"conflict, expected", store.ErrConflict, own, usernameTaken, ""},
		{"not found, unexpected", store.ErrNotFound, reason.Own{}, reason.OutcomeInternal.Err(), "ERROR"},
		{"conflict, unexpected", store.ErrConflict, reason.Own{Conflict: nil, NotFound: accountNotFound}, reason.OutcomeInternal.Err(), "ERROR"},
		{"deadline", context.DeadlineExceeded, own, reason.OutcomeDeadline.Err(), ""},
		{"canceled", context.Canceled, reason.Own{}, reason.OutcomeCanceled.Err(), ""},
		{"database down", store.ErrUnavailable, own, reason.OutcomeDatabaseDown.Err(), "WARN"},
		{"etag mismatch", store.ErrETagMismatch, reason.Own{}, reason.OutcomeETagMismatch.Err(), ""},
		{"anything else", errors.New("pq: syntax error at or near SELECT"), own, reason.OutcomeInternal.Err(), "ERROR"},
		// First match wins: a deadline the driver met while the database
		// was away is the deadline.
		{"deadline and down", fmt.Errorf("%w: %w", store.ErrUnavailable, context.DeadlineExceeded), own, reason.OutcomeDeadline.Err(), ""},
		// Unexpected not found falls through to what else it is.
		{"not found, unexpected, and down", fmt.Errorf("%w: %w", store.ErrNotFound, store.ErrUnavailable), reason.Own{}, reason.OutcomeDatabaseDown.Err(), "WARN"},
	} {
		t.Run(test.name, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&logs, nil))
			err := fmt.Errorf("get account %q: %w", "42", test.err)
			got := reason.Answer(t.Context(), log, "get account", err, test.own)
			if got != test.want {
				t.Errorf("got %v, want %v", got, test.want)
			}
			var line struct{ Level, Msg, Op, Error string }
			if test.wantLevel == "" {
				if logs.Len() > 0 {
					t.Errorf("logged %q, want no line", logs.String())
				}
				return
			}
			if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
				t.Fatalf("log %q: %v", logs.String(), err)
			}
			// The detail goes to the operator: the message of the answer,
			// the operation and the whole error.
			want := struct{ Level, Msg, Op, Error string }{test.wantLevel, status.Convert(test.want).Message(), "get account", err.Error()}
			if diff := cmp.Diff(want, line); diff != "" {
				t.Errorf("log line (-want +got):\n%s", diff)
			}
		})
	}
	if got := reason.Answer(t.Context(), nil, "op", errors.New("boom"), reason.Own{}); got != reason.OutcomeInternal.Err() {
		t.Errorf("without a logger: got %v, want Internal", got)
	}
}

// TestAnswerAsBefore checks the answers of the interceptors that had a
// table of their own (idempotency: plain statuses without an ErrorInfo):
// once completed, as the errordetails interceptor and the gateway complete
// every error, they are the same bytes, but for the database being down,
// which now says DATABASE_UNAVAILABLE as the handlers' answer does.
func TestAnswerAsBefore(t *testing.T) {
	for _, test := range []struct {
		err        error
		before     error
		wantReason string // of before, completed
	}{
		{context.DeadlineExceeded, status.Error(codes.DeadlineExceeded, "deadline exceeded"), "DEADLINE_EXCEEDED"},
		{context.Canceled, status.Error(codes.Canceled, "request canceled"), "CANCELED"},
		{errors.New("boom"), status.Error(codes.Internal, "internal error"), "INTERNAL"},
		{store.ErrUnavailable, status.Error(codes.Unavailable, "database unavailable"), "UNAVAILABLE"},
	} {
		t.Run(test.wantReason, func(t *testing.T) {
			var retry time.Duration
			if reason.Retryable(status.Code(test.before)) {
				retry = time.Second
			}
			before := reason.CompleteError(test.before, "", retry)
			now := reason.CompleteError(reason.Answer(t.Context(), nil, "op", test.err, reason.Own{}), "", retry)
			if before.Reason() != test.wantReason {
				t.Fatalf("before: reason %q, want %q", before.Reason(), test.wantReason)
			}
			wantNow := wire(status.Code(test.before), test.wantReason, status.Convert(test.before).Message())
			if test.wantReason == "UNAVAILABLE" {
				wantNow = wire(codes.Unavailable, reason.DatabaseUnavailable, "database unavailable")
			}
			if retry > 0 {
				ri, _ := anypb.New(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)})
				wantNow.Details = append(wantNow.Details, ri)
			}
			b := func(st *spb.Status) []byte {
				out, err := proto.MarshalOptions{Deterministic: true}.Marshal(st)
				if err != nil {
					t.Fatal(err)
				}
				return out
			}
			if !bytes.Equal(b(wantNow), b(now.GRPCStatus().Proto())) {
				t.Errorf("now: got %v, want %v", now.GRPCStatus().Proto(), wantNow)
			}
			if test.wantReason != "UNAVAILABLE" && !bytes.Equal(b(before.GRPCStatus().Proto()), b(now.GRPCStatus().Proto())) {
				t.Errorf("before %v, now %v: want the same bytes", before.GRPCStatus().Proto(), now.GRPCStatus().Proto())
			}
		})
	}
}

// TestHTTPStatus checks the REST statuses the table gives reasons: only
// those that are not their code's, with an If-Match header and without.
func TestHTTPStatus(t *testing.T) {
	for _, test := range []struct {
		reason      string
		want        int
		wantIfMatch int
	}{
		{reason.IdempotencyKeyReused, http.StatusUnprocessableEntity, http.StatusUnprocessableEntity},
		{reason.ETagMismatch, 0, http.StatusPreconditionFailed},
		{reason.IdempotencyKeyInUse, 0, 0},
		{reason.NotFound, 0, 0},
		{reason.DatabaseUnavailable, 0, 0},
		{reason.Internal, 0, 0},
		{"", 0, 0},
	} {
		if got := reason.HTTPStatus(test.reason, false); got != test.want {
			t.Errorf("HTTPStatus(%q, false): got %d, want %d", test.reason, got, test.want)
		}
		if got := reason.HTTPStatus(test.reason, true); got != test.wantIfMatch {
			t.Errorf("HTTPStatus(%q, true): got %d, want %d", test.reason, got, test.wantIfMatch)
		}
	}
}
