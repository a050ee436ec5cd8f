package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// EndpointState is whether a webhook endpoint receives events.
type EndpointState string

// The values of EndpointState.
const (
	EndpointEnabled  EndpointState = "enabled"
	EndpointDisabled EndpointState = "disabled"
)

// DeliveryState is where the delivery of one event to one endpoint stands.
type DeliveryState string

// The values of DeliveryState.
const (
	DeliveryPending   DeliveryState = "pending"
	DeliverySucceeded DeliveryState = "succeeded"
	DeliveryFailed    DeliveryState = "failed"
)

// WebhookEndpoint is a row of the webhook_endpoints table.
type WebhookEndpoint struct {
	ID          string
	Owner       string
	URL         string
	EventTypes  []string
	Description string
	Secret      string
	// PreviousSecret is the secret the last rotation replaced ("" before
	// the first); it signs beside Secret until PreviousExpireTime (nil
	// before the first rotation).
	PreviousSecret     string
	PreviousExpireTime *time.Time
	State              EndpointState
	CreateTime         time.Time
}

// SigningSecrets returns the secrets that sign a delivery at now, the
// current one first: the previous one too until it expires.
func (e WebhookEndpoint) SigningSecrets(now time.Time) []string {
	if e.PreviousSecret != "" && e.PreviousExpireTime != nil && now.Before(*e.PreviousExpireTime) {
		return []string{e.Secret, e.PreviousSecret}
	}
	return []string{e.Secret}
}

const endpointColumns = `id, owner, url, event_types, description, secret, previous_secret, previous_expire_time, state, create_time`

func scanEndpoint(row pgx.CollectableRow) (WebhookEndpoint, error) {
	var e WebhookEndpoint
	if err := row.Scan(&e.ID, &e.Owner, &e.URL, &e.EventTypes, &e.Description, &e.Secret,
		&e.PreviousSecret, &e.PreviousExpireTime, &e.State, &e.CreateTime); err != nil {
		return WebhookEndpoint{}, err
	}
	e.CreateTime = e.CreateTime.UTC()
	if e.PreviousExpireTime != nil {
		t := e.PreviousExpireTime.UTC()
		e.PreviousExpireTime = &t
	}
	return e, nil
}

// endpointOwnerLock is the first key of the transaction-scoped advisory
// locks that serialize the creates of one owner; the second is a hash of
// the owner. The two-key form is a key space of its own, apart from the
// one-key locks of idempotency keys and migrations. Two owners that shared
// a hash would only make one wait for the other.
const endpointOwnerLock = 0x73686562 // "sheb"

// CreateWebhookEndpoint stores a new enabled endpoint if its owner holds
// fewer than limit; ID, State and CreateTime of e are ignored. It returns
// ErrLimit if the owner holds limit endpoints already, and ErrConflict if
// it has one with the same URL.
//
// The limit holds however many creates of one owner run at once, on any
// replica: each takes the owner's advisory lock for the rest of its
// transaction before it counts, so they count one after the other. The
// insert counts in its own statement, after the lock is held: under READ
// COMMITTED its snapshot then holds every endpoint the transactions that
// held the lock before committed.
func (s *Store) CreateWebhookEndpoint(ctx context.Context, e WebhookEndpoint, limit int) (WebhookEndpoint, error) {
	var created WebhookEndpoint
	err := s.InTx(ctx, func(ctx context.Context) error {
		if _, err := s.db(ctx).Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, endpointOwnerLock, e.Owner); err != nil {
			return err
		}
		rows, _ := s.db(ctx).Query(ctx, `
			INSERT INTO webhook_endpoints (owner, url, event_types, description, secret)
			SELECT $1, $2, $3, $4, $5
			WHERE (SELECT count(*) FROM webhook_endpoints WHERE owner = $1) < $6
			RETURNING `+endpointColumns,
			e.Owner, e.URL, e.EventTypes, e.Description, e.Secret, limit)
		var err error
		created, err = pgx.CollectExactlyOneRow(rows, scanEndpoint)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrLimit
		}
		return err
	})
	if err != nil {
		return WebhookEndpoint{}, fmt.Errorf("create webhook endpoint of %q: %w", e.Owner, translate(err))
	}
	return created, nil
}

// GetWebhookEndpoint returns the owner's endpoint id, or ErrNotFound if there
// is none (or it belongs to another owner).
func (s *Store) GetWebhookEndpoint(ctx context.Context, owner, id string) (WebhookEndpoint, error) {
	rows, _ := s.db(ctx).Query(ctx, `
		SELECT `+endpointColumns+`
		FROM webhook_endpoints
		WHERE id = $1 AND owner = $2`,
		id, owner)
	e, err := pgx.CollectExactlyOneRow(rows, scanEndpoint)
	if err != nil {
		return WebhookEndpoint{}, fmt.Errorf("get webhook endpoint %q: %w", id, translate(err))
	}
	return e, nil
}

// ListWebhookEndpoints returns up to limit endpoints of the owner, newest
// first (by create_time, then id, both descending), starting after after
// (nil: the first page).
func (s *Store) ListWebhookEndpoints(ctx context.Context, owner string, limit int, after *Cursor) ([]WebhookEndpoint, error) {
	sql, args := keysetQuery(`
		SELECT `+endpointColumns+`
		FROM webhook_endpoints
		WHERE owner = $1`, []any{owner}, "create_time", "id", limit, after)
	rows, _ := s.db(ctx).Query(ctx, sql, args...)
	es, err := pgx.CollectRows(rows, scanEndpoint)
	if err != nil {
		return nil, fmt.Errorf("list webhook endpoints of %q: %w", owner, translate(err))
	}
	return es, nil
}

// DeleteWebhookEndpoint deletes the owner's endpoint id with its deliveries,
// or returns ErrNotFound.
func (s *Store) DeleteWebhookEndpoint(ctx context.Context, owner, id string) error {
	tag, err := s.db(ctx).Exec(ctx, `DELETE FROM webhook_endpoints WHERE id = $1 AND owner = $2`, id, owner)
	if err != nil {
		return fmt.Errorf("delete webhook endpoint %q: %w", id, translate(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("delete webhook endpoint %q: %w", id, ErrNotFound)
	}
	return nil
}

// RotateWebhookSecret makes secret the signing secret of the owner's
// endpoint id, keeping the one it replaces as its previous secret until
// previousUntil, and returns the endpoint; ErrNotFound if there is none (or
// it belongs to another owner). The secret a previous rotation kept stops
// signing at once: an endpoint has two secrets at most. Rotations of one
// endpoint at once take turns on its row, each replacing the one before.
func (s *Store) RotateWebhookSecret(ctx context.Context, owner, id, secret string, previousUntil time.Time) (WebhookEndpoint, error) {
	// The right-hand sides read the row as it was: previous_secret gets
	// the secret being replaced.
	rows, _ := s.db(ctx).Query(ctx, `
		UPDATE webhook_endpoints
		SET previous_secret = secret, previous_expire_time = $4, secret = $3
		WHERE id = $1 AND owner = $2
		RETURNING `+endpointColumns,
		id, owner, secret, previousUntil)
	e, err := pgx.CollectExactlyOneRow(rows, scanEndpoint)
	if err != nil {
		return WebhookEndpoint{}, fmt.Errorf("rotate secret of webhook endpoint %q: %w", id, translate(err))
	}
	return e, nil
}

// DisableWebhookEndpoint sets the endpoint's state to disabled and fails its
// pending deliveries with reason. Its deliveries still in River's queue
// find them failed and end.
func (s *Store) DisableWebhookEndpoint(ctx context.Context, id, reason string) error {
	return s.InTx(ctx, func(ctx context.Context) error {
		if _, err := s.db(ctx).Exec(ctx, `
			UPDATE webhook_endpoints
			SET state = 'disabled', queued = 0, parked_until = NULL, probe_until = NULL
			WHERE id = $1`, id); err != nil {
			return fmt.Errorf("disable webhook endpoint %q: %w", id, translate(err))
		}
		if _, err := s.db(ctx).Exec(ctx, `
			UPDATE webhook_deliveries
			SET state = 'failed', last_error = $2, next_attempt_time = NULL
			WHERE endpoint_id = $1 AND state = 'pending'`, id, reason); err != nil {
			return fmt.Errorf("fail deliveries of webhook endpoint %q: %w", id, translate(err))
		}
		return nil
	})
}

// WebhookEvent is a row of the webhook_events table.
type WebhookEvent struct {
	ID          string
	Type        string
	Body        []byte
	Traceparent string
	CreateTime  time.Time
}

// CreateWebhookEvent stores ev, with the endpoints it goes to fixed as
// those the transaction of ctx sees now (ExpandWebhookEvent writes its
// deliveries later), and notifies EventsChannel, which Postgres delivers
// at commit to wake the event stream. Call it in the transaction of the
// change the event announces: it writes one row, however many endpoints
// receive the event. Its position in the event log (ListEvents) is the
// transaction's and the next seq.
func (s *Store) CreateWebhookEvent(ctx context.Context, ev WebhookEvent) error {
	// One round trip for both. Postgres sends the same notification of a
	// transaction once, however many events it writes.
	if _, err := s.db(ctx).Exec(ctx, `
		WITH ev AS (
			INSERT INTO webhook_events (id, type, body, traceparent, create_time, endpoints_snapshot)
			VALUES ($1, $2, $3, $4, $5, pg_current_snapshot())
			RETURNING 1)
		SELECT pg_notify($6, '') FROM ev`,
		ev.ID, ev.Type, ev.Body, ev.Traceparent, ev.CreateTime, EventsChannel); err != nil {
		return fmt.Errorf("create webhook event %q: %w", ev.Type, translate(err))
	}
	return nil
}

// ExpandedBatch is one batch of an event's deliveries written by
// ExpandWebhookEvent.
type ExpandedBatch struct {
	// Endpoints is the number of endpoints of the batch: fewer than asked
	// means the expansion is done.
	Endpoints int
	// Last is the last endpoint of the batch, where the next one starts
	// after.
	Last string
	// Queued are the endpoints whose new delivery has a place in River's
	// queue: the caller enqueues a job for each, in the same transaction.
	// The other new deliveries wait (QueueWaitingDelivery).
	Queued []string
}

// noEndpoint is below every endpoint id: a batch after it is the first.
const noEndpoint = "00000000-0000-0000-0000-000000000000"

// ExpandWebhookEvent writes the pending deliveries of the event to the next
// limit endpoints, in id order after after ("" for the first batch), that
// receive it: enabled, subscribed to its type, and created by a transaction
// that had committed when the event's snapshot was taken (CreateWebhookEvent).
// An endpoint with fewer than window deliveries in River's queue gives the new
// one a place there (Queued); the others' wait. Call it in a transaction:
// the endpoints of the batch stay locked until it ends, so that a delivery
// that ends meanwhile (QueueWaitingDelivery) sees the waiting ones.
//
// It is idempotent: a delivery written already (by an earlier run cut short,
// or a run beside it) is left as it is and is not in Queued, so each
// delivery gets one job however often the expansion runs.
func (s *Store) ExpandWebhookEvent(ctx context.Context, eventID, after string, limit, window int) (ExpandedBatch, error) {
	if after == "" {
		after = noEndpoint
	}
	var b ExpandedBatch
	err := s.InTx(ctx, func(ctx context.Context) error {
		// In id order, so that expansions of events to the same endpoints
		// lock them in the same order and never deadlock.
		rows, _ := s.db(ctx).Query(ctx, `
			SELECT ep.id, ep.queued < $4
			FROM webhook_endpoints ep JOIN webhook_events ev ON ev.id = $1
			WHERE ep.id > $2 AND ep.state = 'enabled' AND ev.type = ANY (ep.event_types)
			  AND pg_visible_in_snapshot(ep.created_xid, ev.endpoints_snapshot)
			ORDER BY ep.id
			LIMIT $3
			FOR NO KEY UPDATE OF ep`, eventID, after, limit, window)
		var ids []string
		var open []bool
		var id string
		var hasRoom bool
		if _, err := pgx.ForEachRow(rows, []any{&id, &hasRoom}, func() error {
			ids, open = append(ids, id), append(open, hasRoom)
			return nil
		}); err != nil {
			return err
		}
		b.Endpoints = len(ids)
		if len(ids) == 0 {
			return nil
		}
		b.Last = ids[len(ids)-1]
		rows, _ = s.db(ctx).Query(ctx, `
			INSERT INTO webhook_deliveries (endpoint_id, event_id, create_time, next_attempt_time, queued)
			SELECT t.endpoint_id, ev.id, ev.create_time, ev.create_time, t.queued
			FROM unnest($2::uuid[], $3::bool[]) AS t (endpoint_id, queued), webhook_events ev
			WHERE ev.id = $1
			ON CONFLICT DO NOTHING
			RETURNING endpoint_id, queued`, eventID, ids, open)
		if _, err := pgx.ForEachRow(rows, []any{&id, &hasRoom}, func() error {
			if hasRoom {
				b.Queued = append(b.Queued, id)
			}
			return nil
		}); err != nil {
			return err
		}
		if len(b.Queued) == 0 {
			return nil
		}
		_, err := s.db(ctx).Exec(ctx, `UPDATE webhook_endpoints SET queued = queued + 1 WHERE id = ANY ($1)`, b.Queued)
		return err
	})
	if err != nil {
		return ExpandedBatch{}, fmt.Errorf("expand webhook event %q: %w", eventID, translate(err))
	}
	return b, nil
}

// WebhookDelivery is a row of the webhook_deliveries table, with the type of
// its event.
type WebhookDelivery struct {
	EndpointID      string
	EventID         string
	EventType       string
	State           DeliveryState
	Attempts        int
	LastHTTPStatus  int
	LastError       string
	LastAttemptTime *time.Time
	NextAttemptTime *time.Time
	CreateTime      time.Time
}

func scanDelivery(row pgx.CollectableRow) (WebhookDelivery, error) {
	var d WebhookDelivery
	if err := row.Scan(&d.EndpointID, &d.EventID, &d.EventType, &d.State, &d.Attempts, &d.LastHTTPStatus,
		&d.LastError, &d.LastAttemptTime, &d.NextAttemptTime, &d.CreateTime); err != nil {
		return WebhookDelivery{}, err
	}
	d.CreateTime = d.CreateTime.UTC()
	for _, t := range []**time.Time{&d.LastAttemptTime, &d.NextAttemptTime} {
		if *t != nil {
			u := (*t).UTC()
			*t = &u
		}
	}
	return d, nil
}

// ListWebhookDeliveries returns up to limit deliveries to the endpoint,
// newest event first (by create_time, then event id, both descending),
// starting after after (nil: the first page).
func (s *Store) ListWebhookDeliveries(ctx context.Context, endpointID string, limit int, after *Cursor) ([]WebhookDelivery, error) {
	sql, args := keysetQuery(`
		SELECT d.endpoint_id, d.event_id, e.type, d.state, d.attempts, d.last_http_status,
		       d.last_error, d.last_attempt_time,
		       -- No attempt comes before the endpoint's park ends.
		       CASE WHEN d.state = 'pending' THEN greatest(d.next_attempt_time, ep.parked_until) END,
		       d.create_time
		FROM webhook_deliveries d
		JOIN webhook_events e ON e.id = d.event_id
		JOIN webhook_endpoints ep ON ep.id = d.endpoint_id
		WHERE d.endpoint_id = $1`, []any{endpointID}, "d.create_time", "d.event_id", limit, after)
	rows, _ := s.db(ctx).Query(ctx, sql, args...)
	ds, err := pgx.CollectRows(rows, scanDelivery)
	if err != nil {
		return nil, fmt.Errorf("list deliveries of webhook endpoint %q: %w", endpointID, translate(err))
	}
	return ds, nil
}

// keysetQuery appends to sql (which ends in a WHERE clause whose values are
// args) the keyset condition after the cursor, the newest-first order on
// (timeCol, idCol) and the limit.
func keysetQuery(sql string, args []any, timeCol, idCol string, limit int, after *Cursor) (string, []any) {
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if after != nil {
		sql += ` AND (` + timeCol + `, ` + idCol + `) < (` + arg(after.CreateTime) + `, ` + arg(after.ID) + `)`
	}
	sql += `
		ORDER BY ` + timeCol + ` DESC, ` + idCol + ` DESC
		LIMIT ` + arg(limit)
	return sql, args
}

// DeliveryAttempt is what one attempt needs: the event, the endpoint and
// where the delivery stands.
type DeliveryAttempt struct {
	Event    WebhookEvent
	Endpoint WebhookEndpoint
	State    DeliveryState
	Attempts int
	// Holds counts the attempts the throttle held back.
	Holds int
	// Park is where the endpoint's parking stands.
	Park EndpointPark
	// Queued is how many of the endpoint's deliveries have a job in
	// River's queue.
	Queued int
}

// EndpointPark is where the parking of an endpoint that keeps failing
// stands, its times measured by the database's clock, the one every replica
// shares.
type EndpointPark struct {
	// Parked means the endpoint failed too often in a row: no attempt goes
	// to it but one probe at a time, until one is taken.
	Parked bool
	// Left is how long until the park ends and a probe may go; 0 once it
	// may.
	Left time.Duration
	// ProbeLeft is how long until the probe in flight ends, at the latest;
	// 0 if none is.
	ProbeLeft time.Duration
}

// GetDeliveryAttempt returns what an attempt to deliver the event to the
// endpoint needs, or ErrNotFound if the delivery is gone (its endpoint was
// deleted).
func (s *Store) GetDeliveryAttempt(ctx context.Context, endpointID, eventID string) (DeliveryAttempt, error) {
	var a DeliveryAttempt
	ep := &a.Endpoint
	ev := &a.Event
	var parkLeft, probeLeft float64
	err := s.db(ctx).QueryRow(ctx, `
		SELECT ep.id, ep.owner, ep.url, ep.event_types, ep.description, ep.secret,
		       ep.previous_secret, ep.previous_expire_time, ep.state, ep.create_time,
		       ev.id, ev.type, ev.body, ev.traceparent, ev.create_time,
		       d.state, d.attempts, d.holds,
		       ep.parked_until IS NOT NULL,
		       coalesce(greatest(extract(epoch FROM ep.parked_until - now()), 0), 0)::float8,
		       coalesce(greatest(extract(epoch FROM ep.probe_until - now()), 0), 0)::float8,
		       ep.queued
		FROM webhook_deliveries d
		JOIN webhook_endpoints ep ON ep.id = d.endpoint_id
		JOIN webhook_events ev ON ev.id = d.event_id
		WHERE d.endpoint_id = $1 AND d.event_id = $2`, endpointID, eventID).Scan(
		&ep.ID, &ep.Owner, &ep.URL, &ep.EventTypes, &ep.Description, &ep.Secret,
		&ep.PreviousSecret, &ep.PreviousExpireTime, &ep.State, &ep.CreateTime,
		&ev.ID, &ev.Type, &ev.Body, &ev.Traceparent, &ev.CreateTime,
		&a.State, &a.Attempts, &a.Holds,
		&a.Park.Parked, &parkLeft, &probeLeft, &a.Queued)
	if err != nil {
		return DeliveryAttempt{}, fmt.Errorf("get delivery of event %q to endpoint %q: %w", eventID, endpointID, translate(err))
	}
	a.Park.Left = seconds(parkLeft)
	a.Park.ProbeLeft = seconds(probeLeft)
	return a, nil
}

// seconds converts seconds to a time.Duration.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// ClaimWebhookProbe makes the caller the probe of the parked endpoint, for
// at most lease, and reports whether it is: false if the park has not ended
// or another probe is in flight. UpdateWebhookEndpointHealth with EndProbe
// ends it.
func (s *Store) ClaimWebhookProbe(ctx context.Context, endpointID string, lease time.Duration) (bool, error) {
	tag, err := s.db(ctx).Exec(ctx, `
		UPDATE webhook_endpoints SET probe_until = now() + $2 * interval '1 microsecond'
		WHERE id = $1 AND parked_until <= now() AND (probe_until IS NULL OR probe_until <= now())`,
		endpointID, lease.Microseconds())
	if err != nil {
		return false, fmt.Errorf("claim the probe of webhook endpoint %q: %w", endpointID, translate(err))
	}
	return tag.RowsAffected() == 1, nil
}

// StartDeliveryAttempt counts an attempt about to be sent and returns its
// number (1 for the first), so an attempt cut short by a crash still counts.
func (s *Store) StartDeliveryAttempt(ctx context.Context, endpointID, eventID string) (int, error) {
	var n int
	err := s.db(ctx).QueryRow(ctx, `
		UPDATE webhook_deliveries SET attempts = attempts + 1
		WHERE endpoint_id = $1 AND event_id = $2
		RETURNING attempts`, endpointID, eventID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("start delivery attempt of event %q to endpoint %q: %w", eventID, endpointID, translate(err))
	}
	return n, nil
}

// DeliveryResult is the outcome of one attempt.
type DeliveryResult struct {
	State      DeliveryState
	HTTPStatus int    // 0 without an answer
	Error      string // "" on success
	// Next is when the next attempt is due; nil once the delivery ended.
	Next *time.Time
	At   time.Time
}

// LockWebhookEndpointHealth locks the endpoint's row for the rest of the
// transaction of ctx and returns its failed attempts in a row. The outcome
// of an attempt is recorded under this lock, so that it and an expansion
// of an event to the endpoint (ExpandWebhookEvent) take turns. It returns
// ErrNotFound if the endpoint was deleted.
func (s *Store) LockWebhookEndpointHealth(ctx context.Context, endpointID string) (failures int, err error) {
	err = s.db(ctx).QueryRow(ctx, `SELECT failures FROM webhook_endpoints WHERE id = $1 FOR NO KEY UPDATE`, endpointID).Scan(&failures)
	if err != nil {
		return 0, fmt.Errorf("lock webhook endpoint %q: %w", endpointID, translate(err))
	}
	return failures, nil
}

// FinishDeliveryAttempt records the outcome of an attempt of a pending
// delivery, and reports whether that ended it (r.State is not pending);
// a delivery that ended already is left as it is.
func (s *Store) FinishDeliveryAttempt(ctx context.Context, endpointID, eventID string, r DeliveryResult) (ended bool, err error) {
	tag, err := s.db(ctx).Exec(ctx, `
		UPDATE webhook_deliveries
		SET state = $3, last_http_status = $4, last_error = $5, next_attempt_time = $6, last_attempt_time = $7
		WHERE endpoint_id = $1 AND event_id = $2 AND state = 'pending'`,
		endpointID, eventID, r.State, r.HTTPStatus, r.Error, r.Next, r.At)
	if err != nil {
		return false, fmt.Errorf("finish delivery attempt of event %q to endpoint %q: %w", eventID, endpointID, translate(err))
	}
	return tag.RowsAffected() == 1 && r.State != DeliveryPending, nil
}

// QueueWaitingDelivery gives the oldest delivery to the endpoint that waits
// for a place in River's queue that place, and returns its event: the
// caller enqueues its job in the same transaction. ok is false if none
// waits. Call it with the endpoint locked (LockWebhookEndpointHealth), when
// one of its deliveries ended and gave its place up.
func (s *Store) QueueWaitingDelivery(ctx context.Context, endpointID string) (eventID string, ok bool, err error) {
	err = s.db(ctx).QueryRow(ctx, `
		UPDATE webhook_deliveries SET queued = true
		WHERE endpoint_id = $1 AND event_id = (
			SELECT event_id FROM webhook_deliveries
			WHERE endpoint_id = $1 AND state = 'pending' AND NOT queued
			ORDER BY create_time, event_id
			LIMIT 1)
		RETURNING event_id`, endpointID).Scan(&eventID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("queue a waiting delivery to webhook endpoint %q: %w", endpointID, translate(err))
	}
	return eventID, true, nil
}

// EndpointHealth is what an attempt changes of its endpoint.
type EndpointHealth struct {
	// Failures is its failed attempts in a row; 0 (it took one) also ends
	// its park and probe.
	Failures int
	// ParkFor, if above 0, parks it for that long from now.
	ParkFor time.Duration
	// EndProbe ends the probe in flight (the attempt was it).
	EndProbe bool
	// Queued is added to its deliveries in River's queue: -1 when one ended
	// and none waited for its place.
	Queued int
}

// UpdateWebhookEndpointHealth records h for the endpoint.
func (s *Store) UpdateWebhookEndpointHealth(ctx context.Context, endpointID string, h EndpointHealth) error {
	_, err := s.db(ctx).Exec(ctx, `
		UPDATE webhook_endpoints SET
			failures = $2,
			parked_until = CASE WHEN $2 = 0 THEN NULL WHEN $3 > 0 THEN now() + $3 * interval '1 microsecond' ELSE parked_until END,
			probe_until = CASE WHEN $2 = 0 OR $4 THEN NULL ELSE probe_until END,
			queued = greatest(queued + $5, 0)
		WHERE id = $1`, endpointID, h.Failures, h.ParkFor.Microseconds(), h.EndProbe, h.Queued)
	if err != nil {
		return fmt.Errorf("update webhook endpoint %q: %w", endpointID, translate(err))
	}
	return nil
}

// PostponeDelivery moves the next attempt of a pending delivery to next and
// counts a hold, not an attempt (throttling held it back).
func (s *Store) PostponeDelivery(ctx context.Context, endpointID, eventID string, next time.Time) error {
	_, err := s.db(ctx).Exec(ctx, `
		UPDATE webhook_deliveries SET next_attempt_time = $3, holds = holds + 1
		WHERE endpoint_id = $1 AND event_id = $2 AND state = 'pending'`,
		endpointID, eventID, next)
	if err != nil {
		return fmt.Errorf("postpone delivery of event %q to endpoint %q: %w", eventID, endpointID, translate(err))
	}
	return nil
}

// CountPendingDeliveries returns the number of deliveries not yet ended.
func (s *Store) CountPendingDeliveries(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db(ctx).QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count pending deliveries: %w", translate(err))
	}
	return n, nil
}

// DeleteEndedWebhookEvents deletes up to limit events older than before
// whose deliveries have all ended, oldest first, with their deliveries, and
// returns how many it deleted. An event no endpoint receives has no
// delivery: it is kept as long, for the event stream to resume through.
func (s *Store) DeleteEndedWebhookEvents(ctx context.Context, before time.Time, limit int) (int64, error) {
	// The ids as an array: the planner then looks each up by its key
	// rather than reading the whole table to join it with the subquery.
	// The order makes the subquery walk the events' create_time index, in
	// generic plans too.
	tag, err := s.db(ctx).Exec(ctx, `
		DELETE FROM webhook_events WHERE id = ANY (ARRAY(
			SELECT e.id FROM webhook_events e
			WHERE e.create_time < $1
			  AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id AND d.state = 'pending')
			ORDER BY e.create_time
			LIMIT $2))`, before, limit)
	if err != nil {
		return 0, fmt.Errorf("delete ended webhook events: %w", translate(err))
	}
	return tag.RowsAffected(), nil
}
