// Package webhooks delivers sheba's events to the endpoints callers register
// (docs/webhooks.md).
//
// A change and its event commit together: Runner.Publish writes the event
// and one River job in the transaction of the change (store.InTx), the same
// two rows however many endpoints receive it. River, a queue kept in the
// same Postgres on a pool of its own, hands each job to one worker of one
// replica at a time, and finds the jobs of a replica that died (its
// "rescuer"), so nothing is lost to restarts and crashes. The event's job
// fans it out: it writes the deliveries to the endpoints the change could
// see, a batch of endpoints per transaction, and one delivery job each.
//
// Each attempt is a signed POST in the Standard Webhooks format (Sign),
// bounded by a timeout, dialed by a dialer that refuses private targets
// after DNS (package ssrf), its answer read to at most a few KiB of body and
// 64 KiB of headers, redirects not followed. A 2xx ends the delivery, a 410
// disables the endpoint, and anything else fails the run of the job, which
// River retries when the worker's NextRetry says: after an exponential
// backoff with full jitter (a longer Retry-After wins, up to an hour), until
// the attempts run out. The errors recorded name no address.
//
// Endpoints are kept apart. Each has at most Options.QueueShare deliveries
// in River's queue; the others wait in the table, and one takes the place of
// each that ends, so an endpoint's backlog holds no more of the queue than
// that. An endpoint that keeps failing is parked: its jobs sleep until the
// park ends, then one probe at a time decides whether it resumes. An
// attempt to an endpoint that is not parked is also held back by the cap on
// attempts in flight to it (a Limiter: by default leases in Postgres, so
// that the cap holds for every replica together) and the adaptive throttle
// of package throttle. Held attempts go back in the queue (River's snooze)
// and do not count as attempts.
package webhooks
