package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestHashTurns checks the bound on password hashing: with one slot and one
// place in the queue, the second caller waits for the first, a third is
// shed at once with ResourceExhausted, and a waiter whose deadline passes
// gets its context's error.
func TestHashTurns(t *testing.T) {
	h, err := newPasswordHasher(defaultHashParams(), hashLimits{running: 1, waiting: 1})
	if err != nil {
		t.Fatal(err)
	}
	release, err := h.turn(t.Context())
	if err != nil {
		t.Fatalf("first turn: %v", err)
	}
	second := make(chan error, 1)
	go func() {
		rel, err := h.turn(t.Context())
		if err == nil {
			rel()
		}
		second <- err
	}()
	for h.waiting.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	if _, err := h.turn(t.Context()); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("third turn with the queue full: got %v, want ResourceExhausted", err)
	}
	select {
	case err := <-second:
		t.Fatalf("second turn did not wait for the first: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	if err := <-second; err != nil {
		t.Errorf("second turn after the first was released: %v", err)
	}

	release, _ = h.turn(t.Context())
	defer release()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := h.turn(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("turn past its deadline: got %v, want context.DeadlineExceeded", err)
	}
	if n := h.waiting.Load(); n != 0 {
		t.Errorf("%d callers still counted as waiting, want 0", n)
	}
}

// TestVerify checks the answers of verify: the right password, a wrong one,
// and an unknown user (no hash), which never succeeds.
func TestVerify(t *testing.T) {
	h, err := newPasswordHasher(defaultHashParams(), defaultHashLimits())
	if err != nil {
		t.Fatal(err)
	}
	hash, err := h.hash(t.Context(), "correct horse")
	if err != nil {
		t.Fatal(err)
	}
	for _, test := range []struct {
		name, password, hash string
		want                 bool
	}{
		{"right password", "correct horse", hash, true},
		{"wrong password", "battery staple", hash, false},
		{"unknown user", "correct horse", "", false},
	} {
		if got, err := h.verify(t.Context(), test.password, test.hash); got != test.want || err != nil {
			t.Errorf("%s: got %v, %v, want %v, nil", test.name, got, err, test.want)
		}
	}
}
