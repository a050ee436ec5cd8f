package loginthrottle

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/shebasvc/sheba/interceptors/ratelimit/redislimit"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/interceptors/retryafter"
)

// ErrThrottled is the one answer to a throttled login: it names the
// username's failures, not the account, so it says nothing of whether the
// username exists. Begin returns it as it is.
var ErrThrottled = reason.Error(codes.ResourceExhausted, reason.LoginThrottled, "too many failed logins for this username; retry later")

type options struct {
	backend    *redislimit.Backend
	size       int
	maxWaiting int
}

// Option configures a Throttle.
type Option func(*options)

// WithRedis keeps the counts in Redis through b, shared by every replica
// on it, and in process while b finds Redis down or slow. A nil b keeps
// them in process only.
func WithRedis(b *redislimit.Backend) Option {
	return func(o *options) { o.backend = b }
}

// WithSize bounds the usernames whose failures are kept in process
// (default 100 000; see local).
func WithSize(n int) Option {
	return func(o *options) { o.size = n }
}

// WithMaxWaiting bounds the logins of one username that wait for a turn
// (default 32; see gate); Begin answers ErrBusy beyond.
func WithMaxWaiting(n int) Option {
	return func(o *options) { o.maxWaiting = n }
}

// defaultSize is the usernames kept in process: about 20 MiB at most
// (TestLocalMemory measures about 210 bytes each with 64-character names).
const defaultSize = 100_000

// Throttle counts failed logins per username, and refuses the logins of a
// username that had max failures within the window until it has passed.
// It is safe for concurrent use.
type Throttle struct {
	max       int
	local     *local
	shared    *shared // nil without Redis
	gate      *gate
	throttled prometheus.Counter
	now       func() time.Time
}

// New returns a throttle of maxFailures failures per window; 0 turns it
// off (Begin then always lets the login go on).
func New(maxFailures int, window time.Duration, opts ...Option) *Throttle {
	o := options{size: defaultSize, maxWaiting: defaultMaxWaiting}
	for _, opt := range opts {
		opt(&o)
	}
	t := &Throttle{
		max: maxFailures,
		throttled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sheba_login_throttled_total",
			Help: "Logins answered 429 LOGIN_THROTTLED: their username had limits.login_failures.max failures in its window.",
		}),
		now: time.Now,
	}
	if maxFailures > 0 {
		t.local = newLocal(maxFailures, window, o.size)
		t.gate = newGate(o.maxWaiting)
		if o.backend != nil {
			t.shared = newShared(o.backend, maxFailures, window)
		}
	}
	return t
}

// Collector returns the counter of throttled logins,
// sheba_login_throttled_total, for the caller to register.
func (t *Throttle) Collector() prometheus.Collector { return t.throttled }

// Result is how a login attempt ended.
type Result int

const (
	// Undecided: the login could not be checked (the database down, the
	// hashing queue full, the deadline passed, a panic). It counts for
	// nothing. The zero Result, so an attempt ended by a deferred End
	// before the outcome was known counts for nothing.
	Undecided Result = iota
	// Failed: an unknown username or a wrong password. It counts.
	Failed
	// Succeeded: the password was right. The username starts afresh.
	Succeeded
)

// Attempt is one login under the throttle, from Begin to End. It holds
// its username's turn (see gate).
type Attempt struct {
	t        *Throttle
	username string
	line     *line
	// shared: checked in Redis, so recorded there.
	shared bool
}

// Begin starts a login for username, which must be in the form usernames
// are compared in (the server validates them first: only a-z 0-9 . _ -,
// compared byte for byte, so the username as sent is its own normal form).
//
// When the username had max failures in its window, Begin returns
// ErrThrottled (ResourceExhausted, reason LOGIN_THROTTLED) at once, with
// the rest of the window as the call's retry-after (retryafter.Set).
// Otherwise it returns the attempt, which End must end; while another
// login of the username runs on this replica, it first waits for its turn
// (see gate). It returns ErrBusy when too many wait already, and ctx's
// error when ctx ends first.
func (t *Throttle) Begin(ctx context.Context, username string) (Attempt, error) {
	if t.max == 0 {
		return Attempt{}, nil
	}
	l, err := t.gate.join(username)
	if err != nil {
		return Attempt{}, err
	}
	if !l.turn.TryAcquire(1) {
		// Another login of the username runs: a throttled one is answered
		// at once, not after it.
		if wait, _ := t.count(ctx, username); wait > 0 {
			t.gate.leave(username, l, false)
			return Attempt{}, t.refuse(ctx, wait)
		}
		if err := l.turn.Acquire(ctx, 1); err != nil {
			t.gate.leave(username, l, false)
			return Attempt{}, err
		}
	}
	// With the turn held no other login of the username ends on this
	// replica, so this count is the one the login is judged by.
	wait, shared := t.count(ctx, username)
	if wait > 0 {
		t.gate.leave(username, l, true)
		return Attempt{}, t.refuse(ctx, wait)
	}
	return Attempt{t: t, username: username, line: l, shared: shared}, nil
}

// count returns 0 when username may try now, else how long until its
// window ends; shared says whether Redis answered.
func (t *Throttle) count(ctx context.Context, username string) (wait time.Duration, shared bool) {
	if t.shared != nil {
		if wait, ok := t.shared.count(ctx, username); ok {
			return wait, true
		}
	}
	return t.local.count(username, t.now()), false
}

// refuse counts a throttled login and returns its answer.
func (t *Throttle) refuse(ctx context.Context, wait time.Duration) error {
	t.throttled.Inc()
	retryafter.Set(ctx, wait)
	return ErrThrottled
}

// End records how the attempt ended and gives the username's turn on. It
// records even when ctx has ended (a login past its deadline may have
// failed), within the Redis backend's own timeout; when Redis does not
// answer, the result is recorded in process.
func (a Attempt) End(ctx context.Context, r Result) {
	if a.t == nil {
		return
	}
	if !a.shared || !a.t.shared.record(context.WithoutCancel(ctx), a.username, r) {
		a.t.local.record(a.username, r, a.t.now())
	}
	// After the record: the next login of the username counts it.
	a.t.gate.leave(a.username, a.line, true)
}
