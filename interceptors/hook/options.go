package hook

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/shebasvc/sheba/interceptors/apikey"
)

type options struct {
	methods  map[string]bool
	timeout  time.Duration
	failOpen bool
	sendBody bool
	headers  []string
	// canonical holds each of headers in the form http.Header keys it
	// by, made once: looking a lowercase name up costs a conversion.
	canonical    []string
	cacheEntries int
	// breakAfter failures in a row open the breaker for breakFor.
	breakAfter uint32
	breakFor   time.Duration
	validate   func(context.Context, proto.Message) error
	metrics    *Metrics
	tracer     trace.Tracer
	log        *slog.Logger
	now        func() time.Time
}

var defaultOptions = options{
	timeout:    100 * time.Millisecond,
	sendBody:   true,
	breakAfter: 5,
	breakFor:   2 * time.Second,
	now:        time.Now,
}

// Option configures the interceptor.
type Option func(*options)

// WithMethods limits the hook to the calls of the given full method names;
// none (the default): every call.
func WithMethods(methods ...string) Option {
	return func(o *options) {
		if len(methods) == 0 {
			o.methods = nil
			return
		}
		o.methods = make(map[string]bool, len(methods))
		for _, m := range methods {
			o.methods[m] = true
		}
	}
}

// WithTimeout bounds each hook call (default 100ms); the call's own
// deadline, when sooner, bounds it too.
func WithTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout = d }
}

// WithFailOpen lets a call go on, as if the hook had said continue, when
// the hook fails; by default (closed) the call answers Unavailable
// HOOK_UNAVAILABLE.
func WithFailOpen(open bool) Option {
	return func(o *options) { o.failOpen = open }
}

// WithSendBody says whether the hook sees the request message (default
// true).
func WithSendBody(send bool) Option {
	return func(o *options) { o.sendBody = send }
}

// WithHeaders names the request headers the hook is told of. The headers
// that carry an API key (apikey.CarriesKey) are left out whatever the
// names given: the hook never sees a key.
func WithHeaders(names ...string) Option {
	return func(o *options) {
		o.headers, o.canonical = nil, nil
		for _, n := range names {
			if !apikey.CarriesKey(n) {
				o.headers = append(o.headers, strings.ToLower(n))
				o.canonical = append(o.canonical, http.CanonicalHeaderKey(n))
			}
		}
	}
}

// WithCache keeps up to n decisions the hook marked cacheable (0, the
// default: none).
func WithCache(n int) Option {
	return func(o *options) { o.cacheEntries = n }
}

// WithBreaker opens the circuit breaker after failures hook calls in a row
// have failed (default 5; a hook call cut short by its caller counts for
// nothing): for the next wait (default 2s) the hook is not called and the
// failure mode answers; then one call tries it again, to the hook's own
// end (its answer, its failure or the timeout) whatever its caller's
// deadline.
func WithBreaker(failures uint32, wait time.Duration) Option {
	return func(o *options) { o.breakAfter, o.breakFor = failures, wait }
}

// WithValidator checks a request message that the hook's answer puts in
// place of the call's, as the validation before the hook checked the
// call's own (an invalid one is a hook failure); nil, the default, refuses
// every replacement.
func WithValidator(validate func(context.Context, proto.Message) error) Option {
	return func(o *options) { o.validate = validate }
}

// WithMetrics counts the hook's outcomes and times its calls in m.
func WithMetrics(m *Metrics) Option {
	return func(o *options) { o.metrics = m }
}

// WithTracerProvider makes a client span of every hook call under the
// call's span.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) {
		if tp != nil {
			o.tracer = tp.Tracer("github.com/shebasvc/sheba/interceptors/hook")
		}
	}
}

// WithLogger logs the breaker's changes of state (default: no log).
func WithLogger(log *slog.Logger) Option {
	return func(o *options) { o.log = log }
}
