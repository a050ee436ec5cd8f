package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// EventsChannel is the channel of the notification every event's
// transaction sends (CreateWebhookEvent): Postgres delivers it to the
// listeners at commit, to wake the readers of the event log.
const EventsChannel = "sheba_events"

// EventPosition is a place in the event log's one order, (created_xid,
// seq): the transaction that wrote an event, then the number drawn when it
// was written (migration 000009). Seq 0 comes before every event of Xid.
type EventPosition struct {
	Xid uint64
	Seq int64
}

// Less reports whether p comes before q.
func (p EventPosition) Less(q EventPosition) bool {
	return p.Xid < q.Xid || p.Xid == q.Xid && p.Seq < q.Seq
}

// LogEvent is an event of the log: a row of webhook_events as a stream
// reads it.
type LogEvent struct {
	ID   string
	Type string
	// Body is the webhook body: {"type", "timestamp", "data"}.
	Body       []byte
	CreateTime time.Time
	Position   EventPosition
}

// EventPage is what one read of the log returns.
type EventPage struct {
	Events []LogEvent
	// Horizon is the oldest transaction still running when the read's
	// statement took its snapshot: every transaction below it has ended,
	// so no event below it can appear any more. The read returned every
	// event after its position and below the horizon unless it returned
	// as many as it was asked for.
	Horizon uint64
	// HeldBack says that a transaction below the snapshot's xmax was still
	// running (Horizon is below xmax): an event committed just now may
	// wait for it, and a reader woken for that event should look again
	// soon.
	HeldBack bool
}

// ListEvents returns up to limit events after position after, in the
// log's order, of the given types (all when types is empty), among those
// whose transaction is below the horizon of this statement's snapshot
// (EventPage.Horizon).
//
// Reading only below the horizon is what makes a position safe to resume
// from: an event above it may belong to a transaction that has not
// committed yet, and would appear later before positions already read
// past. The cost: a transaction that stays open anywhere in the cluster
// (an idle one, a long report, a prepared transaction) holds every reader
// back until it ends.
//
// The xid8 values go through text: pgx has no xid8 type, and they fit an
// int64 for as long as a cluster can live.
func (s *Store) ListEvents(ctx context.Context, after EventPosition, types []string, limit int) (EventPage, error) {
	// One statement, so that the horizon and the events read come from
	// the same snapshot; the lateral join answers one row with the horizon
	// when no event is due.
	rows, _ := s.db(ctx).Query(ctx, `
		WITH h AS (SELECT pg_snapshot_xmin(s) AS xmin, pg_snapshot_xmax(s) AS xmax FROM pg_current_snapshot() s)
		SELECT h.xmin::text::bigint, h.xmin < h.xmax, e.id, e.type, e.body, e.create_time, e.created_xid::text::bigint, e.seq
		FROM h LEFT JOIN LATERAL (
			SELECT id, type, body, create_time, created_xid, seq
			FROM webhook_events
			WHERE (created_xid, seq) > ($1::text::xid8, $2) AND created_xid < h.xmin
			  AND (coalesce(cardinality($3::text[]), 0) = 0 OR type = ANY ($3::text[]))
			ORDER BY created_xid, seq
			LIMIT $4) e ON true`,
		fmt.Sprint(after.Xid), after.Seq, types, limit)
	var page EventPage
	_, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (struct{}, error) {
		var (
			horizon    int64
			held       bool
			id, typ    *string
			body       []byte
			createTime *time.Time
			xid, seq   *int64
		)
		if err := row.Scan(&horizon, &held, &id, &typ, &body, &createTime, &xid, &seq); err != nil {
			return struct{}{}, err
		}
		page.Horizon, page.HeldBack = uint64(horizon), held
		if id != nil {
			page.Events = append(page.Events, LogEvent{
				ID: *id, Type: *typ, Body: body, CreateTime: createTime.UTC(),
				Position: EventPosition{Xid: uint64(*xid), Seq: *seq},
			})
		}
		return struct{}{}, nil
	})
	if err != nil {
		return EventPage{}, fmt.Errorf("list events after %v: %w", after, translate(err))
	}
	return page, nil
}

// EventHorizon returns the horizon of a snapshot taken now
// (EventPage.Horizon): (horizon, 0) is a position before every event not
// yet readable.
func (s *Store) EventHorizon(ctx context.Context) (uint64, error) {
	var h int64
	if err := s.db(ctx).QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint`).Scan(&h); err != nil {
		return 0, fmt.Errorf("event horizon: %w", translate(err))
	}
	return uint64(h), nil
}

// GetEventPosition returns the position and the create time of the event
// id, or ErrNotFound if it is not kept (or id is not a uuid).
func (s *Store) GetEventPosition(ctx context.Context, id string) (EventPosition, time.Time, error) {
	var (
		xid, seq   int64
		createTime time.Time
	)
	err := s.db(ctx).QueryRow(ctx, `
		SELECT created_xid::text::bigint, seq, create_time FROM webhook_events WHERE id = $1`, id).Scan(&xid, &seq, &createTime)
	if err != nil {
		return EventPosition{}, time.Time{}, fmt.Errorf("get position of event %q: %w", id, translate(err))
	}
	return EventPosition{Xid: uint64(xid), Seq: seq}, createTime.UTC(), nil
}
