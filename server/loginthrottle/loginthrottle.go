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

// ErrThrottled is the one answer to a throttled login, whichever count
// throttles it: it names the username's failures, not the account, so it
// says nothing of whether the username exists. Begin returns it as it is.
var ErrThrottled = reason.Error(codes.ResourceExhausted, reason.LoginThrottled, "too many failed logins for this username; retry later")

type options struct {
	backend    *redislimit.Backend
	size       int
	maxWaiting int
	maxAll     int
}

// Option configures a Throttle.
type Option func(*options)

// WithRedis keeps the counts in Redis through b, shared by every replica
// on it, and in process while b finds Redis down or slow. A nil b keeps
// them in process only.
func WithRedis(b *redislimit.Backend) Option {
	return func(o *options) { o.backend = b }
}

// WithMaxAll sets the failures of one username, over every caller, that
// throttle it for every caller within the window (limits.login_failures.
// max_all); 0, the default, means 10 times the failures of one caller.
func WithMaxAll(n int) Option {
	return func(o *options) { o.maxAll = n }
}

// WithSize bounds the entries kept in process, of each of the two counts:
// (username, caller) pairs and usernames (default 100 000; see local).
func WithSize(n int) Option {
	return func(o *options) { o.size = n }
}

// WithMaxWaiting bounds the logins of one username that wait for a turn
// (default 32; see gate); Begin answers ErrBusy beyond.
func WithMaxWaiting(n int) Option {
	return func(o *options) { o.maxWaiting = n }
}

// defaultSize is the entries of each count kept in process: about 40 MiB
// at most for both (TestLocalMemory measures about 400 bytes for a
// username of 64 characters and a key id, in both).
const defaultSize = 100_000

// maxAllTimes is how many times the failures of one caller those of every
// caller may be by default: enough for a few callers who mistype, few
// enough to bound a guess spread over many keys.
const maxAllTimes = 10

// Throttle counts failed logins per username and caller (the API key id,
// "" without a key), and refuses the logins of a caller for a username
// when that caller had max failures for it within the window, and the
// logins of every caller for a username that had maxAll failures from all
// of them, until the window has passed. It is safe for concurrent use.
type Throttle struct {
	max       int
	local     *local
	shared    *shared // nil without Redis
	gate      *gate
	throttled prometheus.Counter
	now       func() time.Time
}

// New returns a throttle of maxFailures failures of one caller per window
// (and of WithMaxAll's over every caller); 0 turns it off (Begin then
// always lets the login go on).
func New(maxFailures int, window time.Duration, opts ...Option) *Throttle {
	o := options{size: defaultSize, maxWaiting: defaultMaxWaiting}
	for _, opt := range opts {
		opt(&o)
	}
	if o.maxAll <= 0 {
		o.maxAll = maxAllTimes * maxFailures
	}
	t := &Throttle{
		max: maxFailures,
		throttled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sheba_login_throttled_total",
			Help: "Logins answered 429 LOGIN_THROTTLED: their caller had limits.login_failures.max failures for the username in its window, or every caller together limits.login_failures.max_all.",
		}),
		now: time.Now,
	}
	if maxFailures > 0 {
		t.local = newLocal(maxFailures, o.maxAll, window, o.size)
		t.gate = newGate(o.maxWaiting)
		if o.backend != nil {
			t.shared = newShared(o.backend, maxFailures, o.maxAll, window)
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

// attemptKey names what a login is counted under: its username and its
// caller.
type attemptKey struct {
	username string
	// caller is the id of the caller's API key, "" without one.
	caller string
}

// Attempt is one login under the throttle, from Begin to End. It holds
// its username's turn for its caller (see gate).
type Attempt struct {
	t    *Throttle
	key  attemptKey
	line *line
	// shared: checked in Redis, so recorded there.
	shared bool
}

// Begin starts a login for username by caller (the id of its API key, ""
// for a call without one). The username must be in the form usernames are
// compared in (the server validates them first: only a-z 0-9 . _ -,
// compared byte for byte, so the username as sent is its own normal form).
//
// When caller had max failures for the username in their window, or every
// caller together maxAll, Begin returns ErrThrottled (ResourceExhausted,
// reason LOGIN_THROTTLED) at once, with the rest of that window as the
// call's retry-after (retryafter.Set). Otherwise it returns the attempt,
// which End must end; while another login of the username by the same
// caller runs on this replica, it first waits for its turn (see gate). It
// returns ErrBusy when too many wait already, and ctx's error when ctx
// ends first.
func (t *Throttle) Begin(ctx context.Context, username, caller string) (Attempt, error) {
	if t.max == 0 {
		return Attempt{}, nil
	}
	k := attemptKey{username: username, caller: caller}
	l, err := t.gate.join(k)
	if err != nil {
		return Attempt{}, err
	}
	if !l.turn.TryAcquire(1) {
		// Another login of the username by this caller runs: a
		// throttled one is answered at once, not after it.
		if wait, _ := t.count(ctx, k); wait > 0 {
			t.gate.leave(k, l, false)
			return Attempt{}, t.refuse(ctx, wait)
		}
		if err := l.turn.Acquire(ctx, 1); err != nil {
			t.gate.leave(k, l, false)
			return Attempt{}, err
		}
	}
	// With the turn held no other login of the username by this caller
	// ends on this replica, so this count is the one the login is judged
	// by.
	wait, shared := t.count(ctx, k)
	if wait > 0 {
		t.gate.leave(k, l, true)
		return Attempt{}, t.refuse(ctx, wait)
	}
	return Attempt{t: t, key: k, line: l, shared: shared}, nil
}

// count returns 0 when k may try now, else how long until the window that
// throttles it ends; shared says whether Redis answered.
func (t *Throttle) count(ctx context.Context, k attemptKey) (wait time.Duration, shared bool) {
	if t.shared != nil {
		if wait, ok := t.shared.count(ctx, k); ok {
			return wait, true
		}
	}
	return t.local.count(k, t.now()), false
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
	if !a.shared || !a.t.shared.record(context.WithoutCancel(ctx), a.key, r) {
		a.t.local.record(a.key, r, a.t.now())
	}
	// After the record: the next login of the username by this caller
	// counts it.
	a.t.gate.leave(a.key, a.line, true)
}
