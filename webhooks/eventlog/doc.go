// Package eventlog reads the event log the webhooks keep (webhook_events)
// for the event stream (docs/events.md): a Hub that follows the log and
// hands every new event to many open streams, and the positions and
// cursors a stream resumes from.
//
// # Order and position
//
// An event's position is (created_xid, seq): the transaction that wrote it,
// then the number drawn when it was written. A read returns only events
// whose transaction is below its statement's horizon, the oldest
// transaction still running (store.ListEvents): every transaction below it
// has ended, so no event can appear later before a position already passed,
// whatever order concurrent transactions commit in. Every reader therefore
// sees the one order, and a stream resumed after any position it was given
// misses nothing committed later. A position means "every event up to it
// was delivered": an event's own, or (horizon, 0) after a read that found
// nothing more, which is what a heartbeat carries.
//
// The price is that a transaction that stays open anywhere in the cluster
// (idle in transaction, a long report, a prepared transaction) holds every
// stream back until it ends: events committed meanwhile wait for it. The
// pools' idle_in_transaction_session_timeout bounds sheba's own.
//
// # Hub
//
// The Hub reads the log once per wake-up, after its own position, and
// hands each new event, decoded once, to every subscriber whose filter it
// matches; transports cache their encodings on the Event (Event.Encoded),
// once for all streams. It wakes on the notification every event's
// transaction sends at commit (LISTEN sheba_events on one connection) and
// at least every Options.PollInterval, so an event reaches subscribers
// within about a second even if a notification is lost. While no
// subscriber is live it reads nothing, and the next subscriber brings its
// position up to the log's horizon. A subscriber that
// starts behind the hub catches up from the database by itself, then joins
// the live feed (Subscriber.Next says how without gap or repeat). A
// subscriber that does not read is cut when Options.Buffer events wait for
// it (ErrTooSlow), and never slows the others.
//
// Everything here is safe for concurrent use, but a Subscriber serves one
// reader.
package eventlog
