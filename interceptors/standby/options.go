package standby

import (
	"log/slog"
	"time"
)

type options struct {
	maxLag  time.Duration
	callers []string
	metrics *Metrics
	log     *slog.Logger
	// primaryUp, when set, reports whether the primary answers; while it
	// does not, a read for the primary answers primaryDown.
	primaryUp   func() bool
	primaryDown error
	// now is the clock of the recent writes (nil: the monotonic clock).
	now func() time.Duration
}

var defaultOptions = options{
	maxLag: time.Second,
	log:    slog.New(slog.DiscardHandler),
}

// Option configures the interceptor.
type Option func(*options)

// WithMaxLag sets the bound (default 1s, database.read_max_lag): a
// standby further behind is not read from, and a caller's reads go to the
// primary for that long after its write.
func WithMaxLag(d time.Duration) Option {
	return func(o *options) { o.maxLag = d }
}

// WithCallers names the callers (API key ids) whose writes are remembered;
// the anonymous caller "" always is. A caller not named here is not.
func WithCallers(ids ...string) Option {
	return func(o *options) { o.callers = ids }
}

// WithMetrics counts every read-only call in m.
func WithMetrics(m *Metrics) Option {
	return func(o *options) { o.metrics = m }
}

// WithLogger logs to l when the standby starts failing, and when it
// answers again (default: no log).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.log = l }
}

// WithPrimaryDown makes a read that is to run on the primary answer err
// at once while up reports false, as the failfast interceptor answers the
// other calls that need the database: the read-only methods are left out
// of failfast, so that the standby still answers them while the primary
// is down. Such a read is counted as it was routed.
func WithPrimaryDown(up func() bool, err error) Option {
	return func(o *options) { o.primaryUp, o.primaryDown = up, err }
}

func evaluateOptions(opts []Option) options {
	o := defaultOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}
