package app

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/interceptors/drain"
	"github.com/shebasvc/sheba/server"
)

// TestStreamSlots: a key holds at most perKey slots and all keys max; a
// released slot is free again, and a key without streams is forgotten.
func TestStreamSlots(t *testing.T) {
	s := newStreamSlots(3, 2)
	for _, c := range []struct {
		key  string
		want bool
	}{{"a", true}, {"a", true}, {"a", false}, {"b", true}, {"b", false}, {"c", false}} {
		if got := s.acquire(c.key); got != c.want {
			t.Fatalf("acquire(%q) with %d open: got %v, want %v", c.key, s.open, got, c.want)
		}
	}
	s.release("b")
	if len(s.byKey) != 1 {
		t.Errorf("keys counted after b's last stream: got %d, want 1", len(s.byKey))
	}
	if !s.acquire("c") {
		t.Error("acquire after a release: got false, want a slot")
	}
}

// TestEndReason: how a stream ended, as sheba_streams_ended_total says it.
func TestEndReason(t *testing.T) {
	live := context.Background()
	gone, cancel := context.WithCancel(live)
	cancel()
	expired, cancel := context.WithDeadline(live, time.Now())
	defer cancel()
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want string
	}{
		{"max_duration", live, server.ErrStreamEnded, endMaxDuration},
		{"too slow", live, server.ErrStreamTooSlow, endTooSlow},
		{"client went away", gone, context.Canceled, endClient},
		{"the client's deadline", expired, status.Error(codes.DeadlineExceeded, "context deadline exceeded"), endClient},
		{"a deadline of the server's", live, status.Error(codes.DeadlineExceeded, "context deadline exceeded"), endError},
		{"drain", live, drain.ErrShuttingDown, endShutdown},
		{"database down", live, status.Error(codes.Unavailable, "database unavailable"), endError},
		{"internal", live, status.Error(codes.Internal, "internal error"), endError},
	} {
		if got := endReason(c.ctx, c.err); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}
