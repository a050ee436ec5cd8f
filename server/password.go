package server

import (
	"context"
	"crypto/rand"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/alexedwards/argon2id"
	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc/codes"

	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/interceptors/retryafter"
)

// defaultHashParams returns the argon2id parameters of new password hashes:
// the OWASP recommendation of 19 MiB, 2 passes, 1 lane. Stored hashes carry
// their own parameters, so changing these affects only new hashes.
func defaultHashParams() argon2id.Params {
	return argon2id.Params{
		Memory:      19 * 1024,
		Iterations:  2,
		Parallelism: 1,
		SaltLength:  16,
		KeyLength:   32,
	}
}

// hashLimits bound the password hashing of a process
// (docs/operations.md#password-hashing): argon2id takes about one core and
// 19 MiB for each hash, so running more at once than there are cores only
// adds memory, never speed.
type hashLimits struct {
	// running is how many hashes run at once.
	running int
	// waiting is how many calls may wait for a turn; more are shed.
	waiting int
}

// defaultHashLimits allows one hash per core (GOMAXPROCS) and 16 waiting
// calls per core: at about 25 ms a hash, the last in the queue waits about
// 0.4 s, while memory stays at running × 19 MiB whatever the number of
// calls; a caller that would wait longer is better told to come back
// (429, Retry-After: 1) than kept holding a connection and a request slot.
func defaultHashLimits() hashLimits {
	n := runtime.GOMAXPROCS(0)
	return hashLimits{running: n, waiting: 16 * n}
}

// errHashBusy answers a call shed because too many wait to hash.
var errHashBusy = reason.Error(codes.ResourceExhausted, reason.Overloaded, "too many password checks in progress; retry later")

// hashRetryAfter is the retry-after of errHashBusy: a full queue drains in
// about a second.
const hashRetryAfter = time.Second

// passwordHasher hashes and verifies passwords with argon2id, at most
// limits.running at a time. It is safe for concurrent use.
type passwordHasher struct {
	params *argon2id.Params
	// dummy is a hash of a random password, verified for unknown usernames so
	// that a login for one takes as long as a wrong password.
	dummy string

	slots      *semaphore.Weighted
	maxWaiting int64
	waiting    atomic.Int64
}

func newPasswordHasher(params argon2id.Params, limits hashLimits) (*passwordHasher, error) {
	h := &passwordHasher{
		params:     &params,
		slots:      semaphore.NewWeighted(int64(max(limits.running, 1))),
		maxWaiting: int64(max(limits.waiting, 0)),
	}
	dummy, err := argon2id.CreateHash(rand.Text(), h.params)
	if err != nil {
		return nil, fmt.Errorf("hash password: %w", err)
	}
	h.dummy = dummy
	return h, nil
}

// shedHashing is the answer of a call shed because too many wait for a
// hash: errHashBusy, with Retry-After.
func shedHashing(ctx context.Context) error {
	retryafter.Set(ctx, hashRetryAfter)
	return errHashBusy
}

// turn waits for a hashing slot within ctx's deadline and returns the func
// that gives it back. When too many calls wait already it answers
// ResourceExhausted at once, with retry-after metadata; when ctx ends first,
// ctx's error (mapped like any other to DeadlineExceeded or Canceled).
func (h *passwordHasher) turn(ctx context.Context) (release func(), err error) {
	if h.slots.TryAcquire(1) {
		return func() { h.slots.Release(1) }, nil
	}
	if h.waiting.Add(1) > h.maxWaiting {
		h.waiting.Add(-1)
		return nil, shedHashing(ctx)
	}
	err = h.slots.Acquire(ctx, 1)
	h.waiting.Add(-1)
	if err != nil {
		return nil, err
	}
	return func() { h.slots.Release(1) }, nil
}

// hash returns the argon2id hash of password.
func (h *passwordHasher) hash(ctx context.Context, password string) (string, error) {
	release, err := h.turn(ctx)
	if err != nil {
		return "", err
	}
	defer release()
	hash, err := argon2id.CreateHash(password, h.params)
	if err != nil {
		return "", fmt.Errorf("hash password: %w", err)
	}
	return hash, nil
}

// verify reports whether password matches hash; the comparison is constant
// time. An unknown user's login verifies against the dummy hash (hash ""),
// which spends the same time and slot and always fails.
func (h *passwordHasher) verify(ctx context.Context, password, hash string) (bool, error) {
	release, err := h.turn(ctx)
	if err != nil {
		return false, err
	}
	defer release()
	unknown := hash == ""
	if unknown {
		hash = h.dummy
	}
	ok, err := argon2id.ComparePasswordAndHash(password, hash)
	if err != nil {
		return false, fmt.Errorf("verify password: %w", err)
	}
	return ok && !unknown, nil
}
