// Package webhooks delivers sheba's events to the endpoints callers register
// (docs/webhooks.md).
//
// A change and its event commit together: Runner.Publish writes the event,
// one delivery row per endpoint that wants it, and one River job per
// delivery in the transaction of the change (store.InTx). River, a queue
// kept in the same Postgres, hands each job to one worker of one replica at
// a time, and finds the jobs of a replica that died (its "rescuer"), so a
// delivery survives restarts and crashes.
//
// Each attempt is a signed POST in the Standard Webhooks format (Sign),
// bounded by a timeout, dialed by a dialer that refuses private targets
// after DNS (package ssrf), its answer read to at most a few KiB of body and
// 64 KiB of headers, redirects not followed. A 2xx ends the delivery, a 410
// disables the endpoint, and anything else is retried after an exponential
// backoff with full jitter (a longer Retry-After wins, up to an hour) until
// the attempts run out. The errors recorded name no address.
//
// An endpoint that fails is not stampeded: a replica has at most
// per_endpoint_concurrency attempts in flight to it, and the adaptive
// throttle of package throttle holds attempts back while the endpoint keeps
// failing. Held attempts are put back in the queue (River's snooze) and do
// not count as attempts.
package webhooks
