package store

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"
)

// IdempotencyKey is the scope of an idempotency key: the caller (an API key
// id), the full gRPC method and the key the client chose. Keys of two
// scopes never meet.
type IdempotencyKey struct {
	Caller string
	Method string
	Key    string
}

// IdempotencyRecord is the recorded outcome of the first request sent with
// a key.
type IdempotencyRecord struct {
	// Fingerprint identifies the request; a retry must bring the same.
	Fingerprint []byte
	// Code is the gRPC status code of the outcome; 0 is OK.
	Code int32
	// Response is the encoded outcome, opaque to the store.
	Response []byte
}

// lockID is the key of the transaction-scoped advisory lock of k: the first
// 8 bytes of a SHA-256 of the scope, so replicas agree on it. Two scopes
// that shared an id would only make one of them wait for the other.
func (k IdempotencyKey) lockID() int64 {
	h := sha256.New()
	for _, s := range []string{k.Caller, k.Method, k.Key} {
		// A length prefix keeps ("ab","c") and ("a","bc") apart.
		_ = binary.Write(h, binary.BigEndian, uint32(len(s)))
		h.Write([]byte(s))
	}
	return int64(binary.BigEndian.Uint64(h.Sum(nil)))
}

// LockIdempotencyKey takes the advisory lock of k for the rest of the
// transaction if no other transaction holds it, and returns the unexpired
// record of k, or nil if there is none. In InTx (or a LazyTx) the lock is
// released when the transaction ends; outside one, the statement is its
// own transaction and the lock ends with it, so the call only tells
// whether k has a record or is in use now, holding nothing after.
//
// A record comes first: when there is one, locked says nothing. With no
// record, locked false means another request with k is running now. One
// statement does both, so a request costs one round trip here; its
// snapshot may predate the commit of a concurrent request that released the
// lock a moment later, which RecordIdempotencyKey then catches.
func (s *Store) LockIdempotencyKey(ctx context.Context, k IdempotencyKey) (rec *IdempotencyRecord, locked bool, err error) {
	var (
		fingerprint, response []byte
		code                  *int32
	)
	err = s.db(ctx).QueryRow(ctx, `
		SELECT pg_try_advisory_xact_lock($1), r.fingerprint, r.code, r.response
		FROM (SELECT) AS one
		LEFT JOIN idempotency_keys AS r
		       ON r.caller = $2 AND r.method = $3 AND r.key = $4 AND r.expire_time > now()`,
		k.lockID(), k.Caller, k.Method, k.Key).Scan(&locked, &fingerprint, &code, &response)
	if err != nil {
		return nil, false, fmt.Errorf("lock idempotency key %q of %s: %w", k.Key, k.Caller, translate(err))
	}
	if code == nil {
		return nil, locked, nil
	}
	return &IdempotencyRecord{Fingerprint: fingerprint, Code: *code, Response: response}, locked, nil
}

// RecordIdempotencyKey records rec as the outcome of k, kept for ttl, and
// reports whether it did: false means an unexpired record of k exists
// (committed by a concurrent request), which GetIdempotencyKey returns. Run
// in the transaction of the change the request made, it commits with it;
// an expired record of k is replaced.
func (s *Store) RecordIdempotencyKey(ctx context.Context, k IdempotencyKey, rec IdempotencyRecord, ttl time.Duration) (bool, error) {
	// ON CONFLICT waits for a concurrent insert of the same scope to commit
	// or roll back, then inserts or does nothing: the primary key, not the
	// advisory lock, is what keeps two records of one key apart.
	tag, err := s.db(ctx).Exec(ctx, `
		INSERT INTO idempotency_keys (caller, method, key, fingerprint, code, response, expire_time)
		VALUES ($1, $2, $3, $4, $5, $6, now() + $7 * interval '1 microsecond')
		ON CONFLICT (caller, method, key) DO UPDATE
		SET fingerprint = excluded.fingerprint, code = excluded.code, response = excluded.response,
		    create_time = excluded.create_time, expire_time = excluded.expire_time
		WHERE idempotency_keys.expire_time <= now()`,
		k.Caller, k.Method, k.Key, rec.Fingerprint, rec.Code, rec.Response, ttl.Microseconds())
	if err != nil {
		return false, fmt.Errorf("record idempotency key %q of %s: %w", k.Key, k.Caller, translate(err))
	}
	return tag.RowsAffected() == 1, nil
}

// GetIdempotencyKey returns the unexpired record of k, or ErrNotFound.
func (s *Store) GetIdempotencyKey(ctx context.Context, k IdempotencyKey) (IdempotencyRecord, error) {
	var rec IdempotencyRecord
	err := s.db(ctx).QueryRow(ctx, `
		SELECT fingerprint, code, response
		FROM idempotency_keys
		WHERE caller = $1 AND method = $2 AND key = $3 AND expire_time > now()`,
		k.Caller, k.Method, k.Key).Scan(&rec.Fingerprint, &rec.Code, &rec.Response)
	if err != nil {
		return IdempotencyRecord{}, fmt.Errorf("get idempotency key %q of %s: %w", k.Key, k.Caller, translate(err))
	}
	return rec, nil
}

// DeleteExpiredIdempotencyKeys deletes up to limit expired records and
// returns how many it deleted. A small limit keeps each statement, and the
// locks it holds, short; rows that another replica is deleting at the same
// time are skipped, not waited for. The ctids go in an array so that the
// delete is a TID scan of exactly those rows.
func (s *Store) DeleteExpiredIdempotencyKeys(ctx context.Context, limit int) (int64, error) {
	tag, err := s.db(ctx).Exec(ctx, `
		DELETE FROM idempotency_keys
		WHERE ctid = ANY (ARRAY(
			SELECT ctid FROM idempotency_keys
			WHERE expire_time <= now()
			ORDER BY expire_time
			LIMIT $1
			FOR UPDATE SKIP LOCKED))`,
		limit)
	if err != nil {
		return 0, fmt.Errorf("delete expired idempotency keys: %w", translate(err))
	}
	return tag.RowsAffected(), nil
}
