package server

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/server/loginthrottle"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
)

// TestLoginThrottledCostsNothing checks that a throttled login is answered
// before the lookup and the hash: with the database unreachable, or every
// hashing slot taken and no place to wait, logins for a throttled
// username, known or unknown, still answer LOGIN_THROTTLED, the very same
// answer for both, while a login for another username meets the database
// or the hasher; and that the attempts those could not decide are given
// back, so they throttle nobody.
func TestLoginThrottledCostsNothing(t *testing.T) {
	hasher, err := newPasswordHasher(defaultHashParams(), hashLimits{running: 1, waiting: 0})
	if err != nil {
		t.Fatal(err)
	}
	hash, err := hasher.hash(t.Context(), "correct horse")
	if err != nil {
		t.Fatal(err)
	}
	reachable := store.New(storetest.NewPool(t))
	if _, err := reachable.CreateAccount(t.Context(), "alice", hash); err != nil {
		t.Fatal(err)
	}
	unreachablePool, err := store.OpenPool(t.Context(), storetest.UnreachableURL(t), 1, tracenoop.NewTracerProvider())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unreachablePool.Close)

	for _, test := range []struct {
		name  string
		store *store.Store
		// holdHasher takes the one hashing slot for the test.
		holdHasher bool
		// wantOther is the reason of a login for a username not throttled.
		wantOther string
	}{
		{"database unreachable", store.New(unreachablePool), false, reason.DatabaseUnavailable},
		{"hasher busy", reachable, true, reason.Overloaded},
	} {
		t.Run(test.name, func(t *testing.T) {
			logins := loginthrottle.New(1, time.Minute)
			for _, u := range []string{"alice", "nobody"} {
				a, err := logins.Begin(t.Context(), u, "")
				if err != nil {
					t.Fatal(err)
				}
				a.End(t.Context(), loginthrottle.Failed)
			}
			s := &accountServer{store: test.store, hasher: hasher, errs: errorMapper{log: slog.New(slog.DiscardHandler)}, events: noEvents{}, logins: logins}
			if test.holdHasher {
				release, err := hasher.turn(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				defer release()
			}
			login := func(username string) *status.Status {
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				_, err := s.Login(ctx, &shebav1.LoginRequest{Username: username, Password: "correct horse"})
				return status.Convert(err)
			}

			known, unknown := login("alice"), login("nobody")
			if reason.Of(known) != reason.LoginThrottled {
				t.Errorf("throttled known username: got %v (%s), want LOGIN_THROTTLED", known.Err(), reason.Of(known))
			}
			if diff := cmp.Diff(known.Proto(), unknown.Proto(), protocmp.Transform()); diff != "" {
				t.Errorf("throttled answers differ, known (-) and unknown (+) username:\n%s", diff)
			}
			for i := range 3 {
				if got := login("bob"); reason.Of(got) != test.wantOther {
					t.Errorf("login %d of a username not throttled: got %v (%s), want %s", i+1, got.Err(), reason.Of(got), test.wantOther)
				}
			}
		})
	}
}

// TestLoginLineFull checks the answer to a login of a username whose line
// is full (too many of its logins wait while one runs): the answer of a
// full hashing queue, and no hash.
func TestLoginLineFull(t *testing.T) {
	hasher, err := newPasswordHasher(defaultHashParams(), hashLimits{running: 1, waiting: 0})
	if err != nil {
		t.Fatal(err)
	}
	logins := loginthrottle.New(10, time.Minute, loginthrottle.WithMaxWaiting(0))
	running, err := logins.Begin(t.Context(), "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	defer running.End(t.Context(), loginthrottle.Undecided)
	s := &accountServer{store: store.New(storetest.NewPool(t)), hasher: hasher, errs: errorMapper{log: slog.New(slog.DiscardHandler)}, events: noEvents{}, logins: logins}
	_, err = s.Login(t.Context(), &shebav1.LoginRequest{Username: "alice", Password: "correct horse"})
	if err != errHashBusy {
		t.Errorf("login of a username whose line is full: got %v, want %v", err, errHashBusy)
	}
}
