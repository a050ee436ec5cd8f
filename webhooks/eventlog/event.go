package eventlog

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/shebasvc/sheba/store"
)

// Position is a place in the log's order: every event up to it was
// delivered (see the package comment).
type Position = store.EventPosition

// NumEncodings is the number of encodings an Event caches (Event.Encoded).
const NumEncodings = 4

// Event is an event of the log, decoded once and shared by every
// subscriber that receives it: it must not be changed.
type Event struct {
	ID         string
	Type       string
	CreateTime time.Time
	// Data is the REST JSON of the resource, as in a webhook's body.
	Data     json.RawMessage
	Position Position

	enc [NumEncodings]struct {
		once sync.Once
		b    []byte
	}
}

// Encoded returns f(e), computed once for e and kind (0 to
// NumEncodings-1) however many streams ask: a transport names its
// encodings by kind, and every stream that sends e shares the bytes. It is
// safe for concurrent use; the bytes must not be changed.
func (e *Event) Encoded(kind int, f func(*Event) []byte) []byte {
	c := &e.enc[kind]
	c.once.Do(func() { c.b = f(e) })
	return c.b
}

// decode returns the Event of a row of the log.
func decode(le store.LogEvent) (*Event, error) {
	// The webhook body: docs/webhooks.md#the-request.
	var body struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(le.Body, &body); err != nil {
		return nil, fmt.Errorf("decode event %q: %w", le.ID, err)
	}
	return &Event{ID: le.ID, Type: le.Type, CreateTime: le.CreateTime, Data: body.Data, Position: le.Position}, nil
}

// ErrCursorExpired means an `after` given by a client names no position
// the service can resume from: an event it does not keep (any more), a
// cursor older than the retention, or a string it never issued.
var ErrCursorExpired = errors.New("event cursor expired")

// cursorPrefix starts every cursor; the version lets a later format come
// beside this one.
const cursorPrefix = "c1_"

// Cursor returns the cursor of position p issued at issued: an opaque
// string that ParseAfter takes back, holding the position and the time it
// was issued (for its expiry). It is not signed: a made-up cursor can only
// name a position in the one log every caller may read.
func Cursor(p Position, issued time.Time) string {
	var b [24]byte
	binary.BigEndian.PutUint64(b[0:], p.Xid)
	binary.BigEndian.PutUint64(b[8:], uint64(p.Seq))
	binary.BigEndian.PutUint64(b[16:], uint64(issued.Unix()))
	return cursorPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// parseCursor returns the position and issue time of a cursor, or false if
// s is not one.
func parseCursor(s string) (Position, time.Time, bool) {
	rest, ok := strings.CutPrefix(s, cursorPrefix)
	if !ok {
		return Position{}, time.Time{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil || len(b) != 24 {
		return Position{}, time.Time{}, false
	}
	p := Position{Xid: binary.BigEndian.Uint64(b[0:]), Seq: int64(binary.BigEndian.Uint64(b[8:]))}
	return p, time.Unix(int64(binary.BigEndian.Uint64(b[16:])), 0), p.Seq >= 0
}
