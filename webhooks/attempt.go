package webhooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/webhooks/ssrf"
)

// maxAnswerBytes is as much of an answer's body as an attempt reads: the
// status is the answer, and a receiver must not make us download more.
const maxAnswerBytes = 4 << 10

// result is the outcome of one request.
type result struct {
	status     int           // 0 without an HTTP answer
	retryAfter time.Duration // from a Retry-After header
	err        error         // why there was no answer
	duration   time.Duration
}

// accepted reports whether the endpoint took the request: it answered, and
// not with a status that says it is overloaded or failing. This is what the
// adaptive throttle counts as an accept.
func (r result) accepted() bool {
	return r.status != 0 && r.status < 500 && r.status != http.StatusTooManyRequests && r.status != http.StatusRequestTimeout
}

// result names the outcome for sheba_webhook_attempts_total.
func (r result) result() string {
	switch {
	case r.status >= 200 && r.status < 300:
		return "success"
	case r.status == http.StatusGone:
		return "gone"
	case r.status != 0:
		return "http_error"
	case timedOut(r.err):
		return "timeout"
	default:
		return "network_error"
	}
}

// errText is what the delivery shows as its last error. It names no
// address (docs/webhooks.md#private-networks): the errors of the network
// name the address dialed, and that of the DNS server.
func (r result) errText() string {
	switch {
	case r.status >= 200 && r.status < 300:
		return ""
	case r.status != 0:
		return fmt.Sprintf("HTTP %d %s", r.status, http.StatusText(r.status))
	case r.err == nil:
		return ""
	case timedOut(r.err):
		return "timeout: no answer within webhooks.timeout"
	case errors.Is(r.err, ssrf.ErrNotAllowed):
		return "refused: the host resolves to an address that is not public, or the port is not allowed"
	}
	if e, ok := errors.AsType[*net.DNSError](r.err); ok {
		return "cannot resolve the host: " + e.Err
	}
	if e, ok := errors.AsType[*net.AddrError](r.err); ok {
		return e.Err
	}
	if e, ok := errors.AsType[*net.OpError](r.err); ok {
		return e.Err.Error() // "connect: connection refused"
	}
	// What the HTTP client says of the answer ("server response headers
	// exceeded 65536 bytes"), without the URL the endpoint shows already.
	if e, ok := errors.AsType[*url.Error](r.err); ok {
		return e.Err.Error()
	}
	return r.err.Error()
}

// timedOut reports whether err is the end of the attempt's time: its
// context's deadline, or a network timeout.
func timedOut(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	ne, ok := errors.AsType[net.Error](err)
	return ok && ne.Timeout()
}

// attempt sends attempt n of the delivery a, in a span linked to the
// request that caused the event.
func (r *Runner) attempt(ctx context.Context, a store.DeliveryAttempt, n int) result {
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("webhook.event_id", a.Event.ID),
			attribute.String("webhook.event_type", a.Event.Type),
			attribute.String("webhook.endpoint_id", a.Endpoint.ID),
			attribute.Int("webhook.attempt", n),
		),
	}
	if a.Event.Traceparent != "" {
		cause := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": a.Event.Traceparent})
		if sc := trace.SpanContextFromContext(cause); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
	}
	ctx, span := r.tracer.Start(ctx, "webhook.deliver", opts...)
	defer span.End()

	r.m.inflight.Inc()
	res := r.send(ctx, a)
	r.m.inflight.Dec()
	r.m.attempts.WithLabelValues(res.result()).Inc()
	r.m.attemptSeconds.Observe(res.duration.Seconds())
	if res.status != 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", res.status))
	}
	if res.result() != "success" {
		span.SetStatus(codes.Error, res.errText())
	}
	return res
}

// send POSTs the event to the endpoint, signed, within the timeout.
func (r *Runner) send(ctx context.Context, a store.DeliveryAttempt) result {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	ts := start.Unix()
	sig, err := Sign(a.Endpoint.SigningSecrets(start), a.Event.ID, ts, a.Event.Body)
	if err != nil {
		return result{err: err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.Endpoint.URL, bytes.NewReader(a.Event.Body))
	if err != nil {
		return result{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sheba-webhooks/1")
	req.Header.Set("webhook-id", a.Event.ID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := r.http.Do(req)
	if err != nil {
		return result{err: err, duration: time.Since(start)}
	}
	// Read a little so a small answer lets the connection be reused; a big
	// one is cut, and the connection with it.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswerBytes))
	resp.Body.Close()
	return result{
		status:     resp.StatusCode,
		retryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), start),
		duration:   time.Since(start),
	}
}

// maxRetryAfter is the longest Retry-After honoured: a longer one counts
// as this long.
const maxRetryAfter = time.Hour

// parseRetryAfter reads a Retry-After header, in seconds or as an HTTP
// date, up to maxRetryAfter; 0 if absent or unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil && secs > 0 {
		return time.Duration(min(secs, int64(maxRetryAfter/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), maxRetryAfter)
	}
	return 0
}
