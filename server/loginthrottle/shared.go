package loginthrottle

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shebasvc/sheba/interceptors/ratelimit/redislimit"
)

// shared counts failed logins in Redis, one key per username
// ("sheba:login:<username>") holding its attempts running and failures of
// the window, which expires with the window. A key exists only while a
// username has failures or attempts running, so Redis holds no more
// usernames than failed in the last window. It is safe for concurrent use.
//
// redis_rate (the rate limits' GCRA) does not fit: after max failures it
// would let one more login through every window/max, where the throttle
// refuses them until the window has passed. The two small scripts below
// keep each decision atomic in one round trip; they are ours because no
// library has a counter of failures with reservations.
type shared struct {
	b      *redislimit.Backend
	max    int
	window time.Duration
}

func newShared(b *redislimit.Backend, maxFailures int, window time.Duration) *shared {
	return &shared{b: b, max: maxFailures, window: window}
}

// beginScript counts an attempt (KEYS[1] the username's key, ARGV[1] max,
// ARGV[2] the window in ms) unless max are counted already, and returns 0,
// or the ms left of the window. The first count starts the window.
var beginScript = redis.NewScript(`
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n >= tonumber(ARGV[1]) then
  local left = redis.call('PTTL', KEYS[1])
  if left > 0 then
    return left
  end
  -- A count without an expiry, which sheba never writes: give it one.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(ARGV[2])
end
if redis.call('INCR', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)

// giveBackScript takes back an attempt counted by beginScript (KEYS[1]),
// deleting the key at 0 and keeping its expiry otherwise.
var giveBackScript = redis.NewScript(`
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n > 1 then
  redis.call('DECR', KEYS[1])
elseif n == 1 then
  redis.call('DEL', KEYS[1])
end
return 0
`)

func key(username string) string { return "sheba:login:" + username }

// begin is local.begin in Redis; answered is false when Redis did not
// answer in time (nothing is counted then: the caller counts in process).
func (s *shared) begin(ctx context.Context, username string) (wait time.Duration, answered bool) {
	var ms int64
	answered = s.b.Do(ctx, func(ctx context.Context, c redis.UniversalClient) (err error) {
		ms, err = beginScript.Run(ctx, c, []string{key(username)}, s.max, s.window.Milliseconds()).Int64()
		return err
	})
	return time.Duration(ms) * time.Millisecond, answered
}

// end is local.end in Redis: a failure is counted already; a success
// deletes the count; an undecided attempt is given back. When Redis does
// not answer, the count stays as it was, to expire with its window.
func (s *shared) end(ctx context.Context, username string, r Result) {
	switch r {
	case Succeeded:
		s.b.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
			return c.Del(ctx, key(username)).Err()
		})
	case Undecided:
		s.b.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
			return giveBackScript.Run(ctx, c, []string{key(username)}).Err()
		})
	}
}
