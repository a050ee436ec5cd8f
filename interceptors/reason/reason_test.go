package reason_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/shebasvc/sheba/interceptors/reason"
)

func TestComplete(t *testing.T) {
	withRetry, _ := status.New(codes.ResourceExhausted, "slow down").WithDetails(
		&errdetails.ErrorInfo{Domain: reason.Domain, Reason: reason.RateLimited},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(3 * time.Second)})
	for _, test := range []struct {
		name       string
		in         *status.Status
		def        string
		retry      time.Duration
		wantReason string
		wantDelay  time.Duration
		wantCount  int // details
	}{
		{"default from the code", status.New(codes.NotFound, "x"), "", 0, "NOT_FOUND", 0, 1},
		{"default given", status.New(codes.InvalidArgument, "x"), reason.MalformedBody, 0, reason.MalformedBody, 0, 1},
		{"reason kept", reason.Status(codes.NotFound, reason.RouteNotFound, "x"), reason.NotFound, 0, reason.RouteNotFound, 0, 1},
		{"retry added", status.New(codes.Unavailable, "x"), "", time.Second, "UNAVAILABLE", time.Second, 2},
		{"retry kept", withRetry, "", time.Second, reason.RateLimited, 3 * time.Second, 2},
		{"unknown code", status.New(codes.Code(99), "x"), "", 0, "UNKNOWN", 0, 1},
	} {
		t.Run(test.name, func(t *testing.T) {
			got, delay := reason.Complete(test.in, test.def, test.retry)
			if r := reason.Of(got); r != test.wantReason {
				t.Errorf("reason: got %q, want %q", r, test.wantReason)
			}
			if delay != test.wantDelay {
				t.Errorf("delay: got %v, want %v", delay, test.wantDelay)
			}
			if n := len(got.Details()); n != test.wantCount {
				t.Errorf("details: got %d (%v), want %d", n, got.Details(), test.wantCount)
			}
			if got.Code() != test.in.Code() || got.Message() != test.in.Message() {
				t.Errorf("got %v %q, want the code and message kept", got.Code(), got.Message())
			}
		})
	}
	ok := status.New(codes.OK, "")
	if got, _ := reason.Complete(ok, "", time.Second); got != ok {
		t.Error("an OK status was changed")
	}
}

func TestStatusLeavesOutWhatCannotMarshal(t *testing.T) {
	st := reason.Status(codes.InvalidArgument, reason.InvalidArgument, "bad \xff",
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "x", Description: "\xff"}}})
	if st.Message() != "bad \uFFFD" {
		t.Errorf("message: got %q", st.Message())
	}
	if n := len(st.Details()); n != 1 || reason.Of(st) != reason.InvalidArgument {
		t.Errorf("details: got %v, want the ErrorInfo alone", st.Details())
	}
	// And the status still goes on the wire.
	if _, err := status.Convert(st.Err()).WithDetails(); err != nil {
		t.Error(err)
	}
}

// Every reason is UPPER_SNAKE, as google.rpc.ErrorInfo asks.
func TestReasonsAreUpperSnake(t *testing.T) {
	for _, r := range []string{
		reason.APIKeyMissing, reason.APIKeyInvalid, reason.LoginFailed, reason.LoginThrottled, reason.RateLimited, reason.KeyRateLimited,
		reason.Overloaded, reason.DatabaseUnavailable, reason.DeadlineExceeded, reason.InvalidArgument, reason.NotFound,
		reason.AlreadyExists, reason.Internal, reason.Canceled, reason.RouteNotFound, reason.MethodNotAllowed, reason.UnsupportedMediaType,
		reason.UnsupportedContentEncoding, reason.BodyTooLarge, reason.MalformedBody, reason.NotAcceptable, reason.IdempotencyKeyReused, reason.IdempotencyKeyInUse,
		reason.WebhookURLNotAllowed, reason.WebhookEndpointLimit, reason.TooManyStreams,
	} {
		for i, c := range r {
			if !(c >= 'A' && c <= 'Z' || c == '_' && i > 0 && i < len(r)-1 || c >= '0' && c <= '9' && i > 0) {
				t.Errorf("reason %q is not UPPER_SNAKE", r)
				break
			}
		}
	}
	for c := codes.OK + 1; c <= codes.Unauthenticated; c++ {
		if reason.ForCode(c) == "" {
			t.Errorf("code %v has no default reason", c)
		}
	}
}

// TestCompleteError checks that CompleteError returns a complete error
// unchanged, completes the others as Complete does, and knows the reason
// and delay of both.
func TestCompleteError(t *testing.T) {
	invalid := reason.Error(codes.InvalidArgument, reason.InvalidArgument, "bad name")
	for _, test := range []struct {
		name       string
		err        error
		retry      time.Duration
		wantSame   bool
		wantReason string
		wantDelay  time.Duration
		wantCode   codes.Code
	}{
		{"made complete", invalid, time.Second, true, reason.InvalidArgument, 0, codes.InvalidArgument},
		{"retryable, made here", reason.Error(codes.ResourceExhausted, reason.Overloaded, "busy"), 2 * time.Second, false, reason.Overloaded, 2 * time.Second, codes.ResourceExhausted},
		{"retryable, own RetryInfo", reason.Error(codes.Unavailable, reason.DatabaseUnavailable, "down", &errdetails.RetryInfo{RetryDelay: durationpb.New(3 * time.Second)}), time.Second, false, reason.DatabaseUnavailable, 3 * time.Second, codes.Unavailable},
		{"plain status", status.Error(codes.NotFound, "no such thing"), 0, false, reason.NotFound, 0, codes.NotFound},
		{"not a status", errors.New("boom"), 0, false, "UNKNOWN", 0, codes.Unknown},
	} {
		t.Run(test.name, func(t *testing.T) {
			got := reason.CompleteError(test.err, "", test.retry)
			if same := error(got) == test.err; same != test.wantSame {
				t.Errorf("returned the same error: got %v, want %v", same, test.wantSame)
			}
			if got.Reason() != test.wantReason || got.Delay() != test.wantDelay || status.Code(got) != test.wantCode {
				t.Errorf("got reason %q delay %v code %v, want %q %v %v", got.Reason(), got.Delay(), status.Code(got), test.wantReason, test.wantDelay, test.wantCode)
			}
			// What the status says agrees with what the error carries.
			if r := reason.Of(got.GRPCStatus()); r != test.wantReason {
				t.Errorf("status's ErrorInfo reason: got %q, want %q", r, test.wantReason)
			}
			if again := reason.CompleteError(got, "", test.retry); again != got {
				t.Errorf("a completed error was completed again")
			}
			if !errors.Is(got, got) || errors.Is(got, reason.Error(codes.Internal, reason.Internal, "other")) {
				t.Errorf("errors.Is: a status error must match itself and only its own status")
			}
		})
	}
}

func TestQuoteAndClip(t *testing.T) {
	long := strings.Repeat("a", reason.MaxQuoted+10)
	// A three-byte rune across the cut is left out whole.
	split := strings.Repeat("a", reason.MaxQuoted-1) + "€" + "tail"
	for _, test := range []struct {
		name, in, quote, clip string
	}{
		{"short", "name", `"name"`, "name"},
		{"exactly the limit", long[:reason.MaxQuoted], `"` + long[:reason.MaxQuoted] + `"`, long[:reason.MaxQuoted]},
		{"long", long, `"` + long[:reason.MaxQuoted] + `"…`, long[:reason.MaxQuoted] + "…"},
		{"rune at the cut", split, `"` + split[:reason.MaxQuoted-1] + `"…`, split[:reason.MaxQuoted-1] + "…"},
		{"not UTF-8", "\xff", `"\xff"`, "\xff"},
	} {
		t.Run(test.name, func(t *testing.T) {
			if got := reason.Quote(test.in); got != test.quote {
				t.Errorf("Quote: got %q, want %q", got, test.quote)
			}
			if got := reason.Clip(test.in); got != test.clip {
				t.Errorf("Clip: got %q, want %q", got, test.clip)
			}
		})
	}
}

// TestStatusErrorProto checks that an error's Proto is its status, made
// once (the same message every time), and a copy for an error completed
// from another.
func TestStatusErrorProto(t *testing.T) {
	made := reason.Error(codes.InvalidArgument, reason.InvalidArgument, "invalid username",
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "username", Description: "too short"}}}).(*reason.StatusError)
	completed := reason.CompleteError(status.Error(codes.NotFound, "no such thing"), "", 0)
	for _, se := range []*reason.StatusError{made, completed} {
		if got, want := se.Proto(), se.GRPCStatus().Proto(); !proto.Equal(got, want) {
			t.Errorf("%v: Proto() = %v, want %v", se, got, want)
		}
	}
	if made.Proto() != made.Proto() {
		t.Error("Proto() of a made error: a new message each call, want the one it was made of")
	}
}
