package idempotency

import (
	"context"
	"crypto/rand"
	"log/slog"
	"time"
)

// DefaultTTL is how long a record is kept when WithTTL is not given.
const DefaultTTL = 24 * time.Hour

type options struct {
	ttl time.Duration
	log *slog.Logger
	// fingerprintKey is the HMAC key of the secrets in a fingerprint.
	fingerprintKey []byte
	// fingerprintMetadata are the metadata keys whose values a
	// fingerprint covers besides the message.
	fingerprintMetadata []string
	// beforeCommit runs after the record is written, in its transaction
	// (tests break the transaction with it).
	beforeCommit func(ctx context.Context) error
}

// Option configures the interceptor.
type Option func(*options)

// WithTTL keeps records for ttl (DefaultTTL if not given).
func WithTTL(ttl time.Duration) Option {
	return func(o *options) { o.ttl = ttl }
}

// WithLogger logs the database errors behind an Internal or Unavailable
// answer, which say nothing more to the caller, and records that could not
// be written.
func WithLogger(log *slog.Logger) Option {
	return func(o *options) { o.log = log }
}

// WithFingerprintKey is the HMAC-SHA256 key under which the fields marked
// debug_redact (the password) enter the fingerprint of a request. It must
// be the same on every replica, and across restarts: a
// retry fingerprinted under another key than its first request is refused
// as a reused key. Without it (or with an empty key), each interceptor
// draws a random key, good for its own process only.
func WithFingerprintKey(key []byte) Option {
	return func(o *options) {
		if len(key) > 0 {
			o.fingerprintKey = key
		}
	}
}

// WithFingerprintMetadata makes the values of the metadata keys part of a
// request, as its message is: a call that carries any of them has them in
// its fingerprint, so a retry with other values is another request
// (IDEMPOTENCY_KEY_REUSED). For the metadata that says what a call asks
// (the if-match condition of a change), not how it is sent. A call that
// carries none of them has the fingerprint of its message alone, as
// without the option.
func WithFingerprintMetadata(keys ...string) Option {
	return func(o *options) { o.fingerprintMetadata = append(o.fingerprintMetadata, keys...) }
}

func evaluateOptions(opts []Option) *options {
	o := &options{
		ttl:            DefaultTTL,
		log:            slog.New(slog.DiscardHandler),
		fingerprintKey: randomKey(),
		beforeCommit:   func(context.Context) error { return nil },
	}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

// randomKey returns 32 random bytes.
func randomKey() []byte {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	return key
}
