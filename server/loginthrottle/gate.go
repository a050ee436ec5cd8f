package loginthrottle

import (
	"errors"
	"sync"

	"golang.org/x/sync/semaphore"
)

// ErrBusy is Begin's answer when as many logins of the username by the
// caller wait for their turn as the throttle lets wait: the caller sheds
// the login as a full hashing queue would (429, retry after a second).
var ErrBusy = errors.New("loginthrottle: too many logins of this username waiting")

// defaultMaxWaiting is how many logins of one username by one caller may
// wait for their turn: more than a user sends at once; few enough that a
// caller's flood for one username holds a small part of the concurrency
// limit (limits.max_inflight, 512 by default) and that the last in line
// waits about 32 hashes (0.8 s at 25 ms), well within the default
// deadline.
const defaultMaxWaiting = 32

// gate lets one login of a username by one caller run at a time on this
// replica, so that each one is judged by the count the one before it left:
// concurrent logins cannot pass the limit together, and are not refused
// for being concurrent either (they wait their turn, first come first
// served, within their deadline). With the counts in Redis, each replica
// has its own gate, so N replicas may together let N−1 failures past max.
// The lines are per caller, so that one caller's flood of logins for a
// username never makes another caller's wait or be shed (ErrBusy); the
// callers' logins then run side by side, so those of C callers at once
// may together let C−1 failures past maxAll.
//
// A line lives only while a login of its username runs or waits, so the
// gate holds no more than the concurrency limit lets run. x/sync's
// semaphore is the turn: FIFO, and its Acquire gives up with the context.
// It is safe for concurrent use.
type gate struct {
	maxWaiting int

	mu    sync.Mutex
	lines map[attemptKey]*line
}

// line is the turn of one username's logins by one caller, and how many
// hold or wait for it.
type line struct {
	turn *semaphore.Weighted
	refs int
}

func newGate(maxWaiting int) *gate {
	return &gate{maxWaiting: maxWaiting, lines: map[attemptKey]*line{}}
}

// join puts a login in k's line, or returns ErrBusy when the line is full.
// The login then takes its turn (l.turn) and must leave.
func (g *gate) join(k attemptKey) (*line, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.lines[k]
	if l == nil {
		l = &line{turn: semaphore.NewWeighted(1)}
		g.lines[k] = l
	}
	// One holds the turn; the others wait.
	if l.refs > g.maxWaiting {
		return nil, ErrBusy
	}
	l.refs++
	return l, nil
}

// leave takes a login out of k's line, giving the turn on if it held it.
func (g *gate) leave(k attemptKey, l *line, held bool) {
	if held {
		l.turn.Release(1)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if l.refs--; l.refs == 0 {
		delete(g.lines, k)
	}
}
