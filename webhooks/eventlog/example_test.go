package eventlog_test

import (
	"context"
	"errors"
	"time"

	"github.com/shebasvc/sheba/webhooks/eventlog"
)

// A stream's loop: events as they come, a heartbeat with a cursor after
// each silence, resumable from the last id or cursor sent.
func ExampleHub_Subscribe() {
	var (
		ctx        context.Context // the stream's
		h          *eventlog.Hub
		after      string                // the client's after_event_id
		send       func(*eventlog.Event) // sends an event (its encoding cached by e.Encoded)
		heartbeat  func(cursor string)   // sends a heartbeat
		every      = 15 * time.Second    // events.heartbeat
		encodeJSON func(*eventlog.Event) []byte
	)
	pos, err := h.ParseAfter(ctx, after)
	if err != nil {
		return // ErrCursorExpired: OUT_OF_RANGE EVENT_CURSOR_EXPIRED
	}
	s, err := h.Subscribe(ctx, []string{"subscription.created"}, pos)
	if err != nil {
		return
	}
	defer s.Close()
	heartbeat(h.Cursor(s.Position())) // the first message, at once
	for {
		wait, cancel := context.WithTimeout(ctx, every)
		e, err := s.Next(wait)
		cancel()
		switch {
		case err == nil:
			e.Encoded(0, encodeJSON) // once for every stream
			send(e)
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			heartbeat(h.Cursor(s.Position()))
		default:
			return // ErrTooSlow: RESOURCE_EXHAUSTED STREAM_TOO_SLOW; ctx's end; ErrStopped
		}
	}
}
