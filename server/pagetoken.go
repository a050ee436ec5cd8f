package server

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/store"
)

// A page token is the keyset position of the last row of a page, bound to
// the listing and filter it was issued for (docs/api.md#paging):
//
//	version (1 byte) | create_time, Unix µs (8) | id (16) | tag (16)
//
// base64url-encoded without padding. tag is the first 16 bytes of an
// HMAC-SHA256, under the server's paging key, over the bytes before it and
// the binding (the listing's name and its filter), so only a server holding
// the key can make a token, and a token altered, made up, or reused with
// another listing or filter is refused. The position is readable by whoever
// holds a token: it is the time and id of a row the client was shown.
//
// One pageTokens serves every keyset-paged list; each passes its own
// binding.
const (
	pageTokenVersion = 2
	pageTokenTagLen  = 16
	pageTokenBodyLen = 1 + 8 + 16
	pageTokenLen     = pageTokenBodyLen + pageTokenTagLen

	// minPageKeyLen is the shortest paging key: 256 bits, the size of the
	// hash, as RFC 2104 advises.
	minPageKeyLen = 32
)

// The times a position may hold: those of a google.protobuf.Timestamp,
// which every row's time is. A position outside them was never issued.
var (
	minPageTime = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	maxPageTime = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC).UnixMicro()
)

var errBadPageToken = errors.New("invalid page token: pass the next_page_token of the previous page with the same filter")

// pageTokens encodes and checks page tokens under one key. It is safe for
// concurrent use.
type pageTokens struct {
	key []byte
}

// newPageTokens returns the codec of key; an empty key is replaced by a
// random one, good for this process only.
func newPageTokens(key []byte) (pageTokens, error) {
	if len(key) == 0 {
		key = make([]byte, minPageKeyLen)
		rand.Read(key)
	}
	if len(key) < minPageKeyLen {
		return pageTokens{}, fmt.Errorf("page token key: want at least %d bytes, got %d", minPageKeyLen, len(key))
	}
	return pageTokens{key: append([]byte(nil), key...)}, nil
}

// Encode returns the token of position c in the listing that binding names.
func (p pageTokens) Encode(c store.Cursor, binding string) string {
	id, err := uuid.Parse(c.ID)
	if err != nil {
		// IDs come from the database, which only holds UUIDs.
		panic("page token: id from the database is not a UUID: " + c.ID)
	}
	var b [pageTokenLen]byte
	b[0] = pageTokenVersion
	binary.BigEndian.PutUint64(b[1:9], uint64(c.CreateTime.UnixMicro()))
	copy(b[9:25], id[:])
	copy(b[pageTokenBodyLen:], p.tag(b[:pageTokenBodyLen], binding))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Decode returns the position token holds, if this server issued it for
// binding; every other token is errBadPageToken.
func (p pageTokens) Decode(token, binding string) (*store.Cursor, error) {
	if base64.RawURLEncoding.DecodedLen(len(token)) != pageTokenLen {
		return nil, errBadPageToken
	}
	var b [pageTokenLen]byte
	n, err := base64.RawURLEncoding.Decode(b[:], []byte(token))
	if err != nil || n != pageTokenLen || b[0] != pageTokenVersion {
		return nil, errBadPageToken
	}
	if !hmac.Equal(p.tag(b[:pageTokenBodyLen], binding), b[pageTokenBodyLen:]) {
		return nil, errBadPageToken
	}
	micros := int64(binary.BigEndian.Uint64(b[1:9]))
	if micros < minPageTime || micros > maxPageTime {
		return nil, errBadPageToken
	}
	id, err := uuid.FromBytes(b[9:25])
	if err != nil {
		return nil, errBadPageToken
	}
	return &store.Cursor{CreateTime: time.UnixMicro(micros).UTC(), ID: id.String()}, nil
}

func (p pageTokens) tag(body []byte, binding string) []byte {
	m := hmac.New(sha256.New, p.key)
	m.Write(body)
	m.Write([]byte(binding))
	return m.Sum(nil)[:pageTokenTagLen]
}

// page is the page a list request asks for, checked: its size, the
// position it starts after (nil: the first page) and the binding of the
// listing and filter its tokens are issued for.
type page struct {
	size    int
	after   *store.Cursor
	binding string
}

// nextPage cuts rows, read with a limit of pg.size+1, to the page and
// returns the token of the next page: "" when the extra row was not there.
func nextPage[T any](tokens pageTokens, rows []T, pg page, cursor func(T) store.Cursor) ([]T, string) {
	if len(rows) <= pg.size {
		return rows, ""
	}
	rows = rows[:pg.size]
	return rows, tokens.Encode(cursor(rows[pg.size-1]), pg.binding)
}

// The sizes of docs/api.md#paging: a page_size of 0 asks for
// defaultPageSize rows, one over maxPageSize for maxPageSize (a negative one
// breaks its constraint, and never reaches a handler).
const (
	defaultPageSize = 50
	maxPageSize     = 1000
)

// page returns the page of size rows that token starts in the listing
// binding names: "" is the first page, and a token not issued for binding
// is an InvalidArgument violation of page_token, the one rule of a list
// request that no constraint can say.
func (p pageTokens) page(size int32, token, binding string) (page, error) {
	pg := page{size: defaultPageSize, binding: binding}
	if size > 0 {
		pg.size = int(min(size, maxPageSize))
	}
	if token == "" {
		return pg, nil
	}
	c, err := p.Decode(token, binding)
	if err != nil {
		var v reason.Violations
		v.Add("page_token", err.Error())
		return page{}, v.Err()
	}
	pg.after = c
	return pg, nil
}
