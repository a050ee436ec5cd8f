package health

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestHealthNeedsTwoMisses drives the checker by hand: a database that has
// answered is down only after two failed pings in a row; one that never
// answered is not ready from the first failure.
func TestHealthNeedsTwoMisses(t *testing.T) {
	var answers []error
	h := NewChecker(func(context.Context) error {
		err := answers[0]
		answers = answers[1:]
		return err
	}, time.Second, []string{"sheba.v1.AccountService"})
	down := errors.New("connection refused")
	for i, step := range []struct {
		ping      error
		wantReady bool
	}{
		{down, false}, // never answered yet
		{nil, true},
		{down, true}, // one miss
		{nil, true},
		{down, true},
		{down, false}, // two in a row
		{down, false},
		{nil, true},
	} {
		answers = append(answers, step.ping)
		h.check(t.Context())
		ready, _ := h.state()
		if ready != step.wantReady || h.DatabaseUp() != step.wantReady {
			t.Errorf("step %d (ping %v): ready %v, database up %v; want %v", i, step.ping, ready, h.DatabaseUp(), step.wantReady)
		}
	}
	h.Shutdown()
	answers = append(answers, nil)
	h.check(t.Context())
	if ready, reason := h.state(); ready || reason != "shutting down" {
		t.Errorf("after shutdown: ready %v (%s), want not ready", ready, reason)
	}
	if !h.DatabaseUp() {
		t.Error("after shutdown the database still answers: calls in flight must not be turned away")
	}
}
