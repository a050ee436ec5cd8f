package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/shebasvc/sheba/store"
)

// A page token is the keyset position of the last row of a page, bound to the
// plan filter it was issued for:
//
//	version (1 byte) | create_time, Unix µs (8) | id (16) | check (8)
//
// base64url-encoded without padding. check is the start of a SHA-256 over a
// fixed label, the position and the plan, so an altered or made-up token, or
// one reused with another filter, is rejected as invalid. The token is not a
// secret and needs no key: whoever forges a valid one only chooses where the
// listing starts, which page_size and the filter already allow.
const (
	pageTokenVersion = 1
	pageTokenLen     = 1 + 8 + 16 + 8
	pageTokenLabel   = "sheba.v1.ListSubscriptions page token"
)

var errBadPageToken = errors.New("invalid page token: pass the next_page_token of the previous page with the same filter")

func encodePageToken(c store.Cursor, plan string) string {
	id, err := uuid.Parse(c.ID)
	if err != nil {
		// IDs come from the database, which only holds UUIDs.
		panic("page token: id from the database is not a UUID: " + c.ID)
	}
	var b [pageTokenLen]byte
	b[0] = pageTokenVersion
	binary.BigEndian.PutUint64(b[1:9], uint64(c.CreateTime.UnixMicro()))
	copy(b[9:25], id[:])
	check := pageTokenCheck(b[:25], plan)
	copy(b[25:], check[:8])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func decodePageToken(token, plan string) (*store.Cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(b) != pageTokenLen || b[0] != pageTokenVersion {
		return nil, errBadPageToken
	}
	check := pageTokenCheck(b[:25], plan)
	if !bytes.Equal(check[:8], b[25:]) {
		return nil, errBadPageToken
	}
	id, err := uuid.FromBytes(b[9:25])
	if err != nil {
		return nil, errBadPageToken
	}
	micros := int64(binary.BigEndian.Uint64(b[1:9]))
	return &store.Cursor{CreateTime: time.UnixMicro(micros).UTC(), ID: id.String()}, nil
}

func pageTokenCheck(position []byte, plan string) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte(pageTokenLabel))
	h.Write(position)
	h.Write([]byte(plan))
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
