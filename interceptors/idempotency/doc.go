// Package idempotency makes a request safe to retry: a client sends an
// idempotency key with a create, and a retry with the same key gets the
// first outcome again instead of making a second change
// (docs/api.md#idempotency-keys).
//
// The key comes in the "idempotency-key" metadata (the REST gateway passes
// the Idempotency-Key header there): a bare token or the quoted string of
// the IETF Idempotency-Key draft, 1 to 255 visible ASCII characters. Keys
// are scoped to the caller (an API key id), the method and the key. A call
// without a key runs as if the interceptor were not there.
//
// With a key, the interceptor first looks at the key, in one statement
// outside any transaction (store.LockIdempotencyKey): whether the scope has
// a record, and whether a transaction-scoped advisory lock of it is free.
// Then:
//
//   - a record with the same request fingerprint: its outcome is answered
//     again, with "idempotent-replayed: true" metadata; the handler does not
//     run;
//   - a record with another fingerprint: InvalidArgument, reason
//     IDEMPOTENCY_KEY_REUSED (422 on REST);
//   - no record, lock taken by another call: Aborted, reason
//     IDEMPOTENCY_KEY_IN_USE, with retry-after of 1 second;
//   - otherwise the handler runs with a transaction in its context
//     (Store.WithLazyTx) that begins at its first store call, so that what
//     the handler does before (CreateAccount waits for a password hash
//     slot, and hashes) holds no connection nor transaction. Beginning, the
//     transaction claims the key: it takes the lock and reads the record
//     again, and if another call took the key meanwhile, the handler's
//     store calls fail (it gives up as if canceled) and the call is
//     answered as above. The handler's store calls (and anything they
//     enqueue with InTx) join the transaction; its response is recorded
//     with INSERT … ON CONFLICT in it, and both commit together. A handler
//     that made no store call claims the key then. If the insert finds a
//     record that a concurrent call committed meanwhile, this call's
//     change is rolled back and that record is answered.
//
// "Running" is thus being in the transaction: two calls with one key that
// both pass the first look run up to their claims; the first to claim
// goes on, the other finds the key in use or the record.
//
// The fingerprint is the SHA-256 of the request message in deterministic
// protobuf encoding: REST and gRPC decode the same logical request into the
// same message, so a retry may even switch transports. Every field counts;
// the fields marked debug_redact (the password) enter it only as their
// HMAC-SHA256 under the key of WithFingerprintKey, so that the record
// holds no fast unkeyed hash of a secret. The values of the metadata named
// by WithFingerprintMetadata (the if-match condition of a change) count
// too, when a call carries them.
//
// What is recorded: OK, and the errors by which the handler answers about
// the data (NotFound, AlreadyExists, FailedPrecondition, PermissionDenied,
// OutOfRange). An error is recorded after its transaction rolled back (the
// failed statement aborted it), in a statement of its own; it made no
// change. Not recorded, so that a retry runs anew: InvalidArgument, which
// the handlers return only from validation, before any lookup; and the
// errors that say nothing of the request (Canceled, DeadlineExceeded,
// Unavailable, ResourceExhausted, Aborted, Internal, Unknown): their
// transaction rolled back, so nothing happened. Calls rejected before this
// interceptor (auth, limits) are never seen.
//
// Records expire after the TTL (WithTTL, default 24h): an expired record is
// ignored and replaced, and Reap deletes them in small batches.
//
// It sits after auth (it needs the caller), the rate limits and the
// concurrency limit (a rejected call takes no lock nor connection), the
// timeout and failfast, and right before the handler: the whole
// transaction runs under the call's deadline, and a deadline that passes
// in the middle (or while the handler waits, before it) rolls it all back,
// so nothing is recorded and the retry runs anew; a deadline that passes
// after the commit makes the timeout answer DeadlineExceeded, and the
// retry replays the recorded outcome.
// Apply it only to the methods that take keys (selector).
//
// Codes: InvalidArgument (a malformed key, a key without an API key, a
// reused key), Aborted (key in use), Unavailable, DeadlineExceeded,
// Canceled or Internal when the database fails; and the replayed codes.
package idempotency
