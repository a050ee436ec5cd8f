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

// errThrottled is the one answer to a throttled login: it names the
// username's failures, not the account, so it says nothing of whether the
// username exists.
var errThrottled = reason.Error(codes.ResourceExhausted, reason.LoginThrottled, "too many failed logins for this username; retry later")

type options struct {
	backend *redislimit.Backend
	size    int
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

// defaultSize is the usernames kept in process: about 20 MiB at most
// (TestLocalMemory measures about 210 bytes each with 64-character names).
const defaultSize = 100_000

// Throttle counts failed logins per username, and refuses the logins of a
// username that had max failures within the window until it has passed.
// It is safe for concurrent use.
type Throttle struct {
	max       int
	window    time.Duration
	local     *local
	shared    *shared // nil without Redis
	throttled prometheus.Counter
	now       func() time.Time
}

// New returns a throttle of maxFailures failures per window; 0 turns it
// off (Begin then always lets the login go on).
func New(maxFailures int, window time.Duration, opts ...Option) *Throttle {
	o := options{size: defaultSize}
	for _, opt := range opts {
		opt(&o)
	}
	t := &Throttle{
		max:    maxFailures,
		window: window,
		throttled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sheba_login_throttled_total",
			Help: "Logins answered 429 LOGIN_THROTTLED: their username had limits.login_failures.max failures in its window.",
		}),
		now: time.Now,
	}
	if maxFailures > 0 {
		t.local = newLocal(maxFailures, window, o.size)
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
	// before the outcome was known is given back.
	Undecided Result = iota
	// Failed: an unknown username or a wrong password. It counts.
	Failed
	// Succeeded: the password was right. The username starts afresh.
	Succeeded
)

// Attempt is one login under the throttle, from Begin to End.
type Attempt struct {
	t        *Throttle
	username string
	// shared: counted in Redis, so ended there.
	shared bool
}

// Begin starts a login for username, which must be in the form usernames
// are compared in (the server validates them first: only a-z 0-9 . _ -,
// compared byte for byte, so the username as sent is its own normal form).
// When the username has had max failures in its window, or has as many
// attempts running, it returns ResourceExhausted, reason LOGIN_THROTTLED,
// with the rest of the window as the call's retry-after (retryafter.Set):
// the handler answers it at once. Otherwise the attempt counts as a failure
// until End says how it ended; End must be called once.
func (t *Throttle) Begin(ctx context.Context, username string) (Attempt, error) {
	if t.max == 0 {
		return Attempt{}, nil
	}
	a := Attempt{t: t, username: username}
	var wait time.Duration
	if t.shared != nil {
		wait, a.shared = t.shared.begin(ctx, username)
	}
	if !a.shared {
		wait = t.local.begin(username, t.now())
	}
	if wait > 0 {
		t.throttled.Inc()
		retryafter.Set(ctx, wait)
		return Attempt{}, errThrottled
	}
	return a, nil
}

// End records how the attempt ended. It does its work even when ctx has
// ended (a login past its deadline is Undecided, and must be given back),
// within the Redis backend's own timeout.
func (a Attempt) End(ctx context.Context, r Result) {
	switch {
	case a.t == nil:
	case a.shared:
		a.t.shared.end(context.WithoutCancel(ctx), a.username, r)
	default:
		a.t.local.end(a.username, r, a.t.now())
	}
}
