package loginthrottle

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shebasvc/sheba/interceptors/ratelimit/redislimit"
)

// shared counts failed logins in Redis: two keys per username, each
// holding the failures of its window and expiring with it, so Redis holds
// only what failed within the last window:
//
//   - "sheba:login:<username>:<key id>", the failures of one caller (the
//     key id empty for calls without a key), bounded by max;
//   - "sheba:login:<username>", those of every caller, bounded by maxAll.
//
// Neither a username nor a key id holds a colon, so no two keys are the
// same. A count, a failure and a success are one round trip each. It is
// safe for concurrent use.
//
// redis_rate (the rate limits' GCRA) does not fit: after max failures it
// would let one more login through every window/max, where the throttle
// refuses them until the window has passed. The two scripts below are
// ours for that reason; each keeps its step atomic.
type shared struct {
	b           *redislimit.Backend
	max, maxAll int
	window      time.Duration
}

func newShared(b *redislimit.Backend, maxFailures, maxAll int, window time.Duration) *shared {
	return &shared{b: b, max: maxFailures, maxAll: maxAll, window: window}
}

// countScript returns 0 when the count at KEYS[1] is below ARGV[1] (max)
// and the one at KEYS[2] below ARGV[2] (maxAll), else the ms left of the
// window of the count that throttles (the later, if both do). ARGV[3] is
// the window in ms, given to a count that has lost its expiry, which
// sheba never writes.
var countScript = redis.NewScript(`
local function left(key, limit)
  local n = tonumber(redis.call('GET', key) or '0')
  if n < limit then
    return 0
  end
  local ms = redis.call('PTTL', key)
  if ms > 0 then
    return ms
  end
  redis.call('PEXPIRE', key, ARGV[3])
  return tonumber(ARGV[3])
end
return math.max(left(KEYS[1], tonumber(ARGV[1])), left(KEYS[2], tonumber(ARGV[2])))
`)

// failScript counts a failure at KEYS[1] and at KEYS[2]; the first of each
// starts its window of ARGV[1] ms.
var failScript = redis.NewScript(`
for _, key in ipairs(KEYS) do
  if redis.call('INCR', key) == 1 then
    redis.call('PEXPIRE', key, ARGV[1])
  end
end
return 0
`)

// keys returns the Redis keys of k's count and of its username's, in the
// order of the scripts' KEYS.
func keys(k attemptKey) []string {
	return []string{callerKey(k), usernameKey(k)}
}

// callerKey returns the Redis key of k's count.
func callerKey(k attemptKey) string { return usernameKey(k) + ":" + k.caller }

// usernameKey returns the Redis key of the count of k's username across
// callers.
func usernameKey(k attemptKey) string { return "sheba:login:" + k.username }

// count is local.count in Redis; answered is false when Redis did not
// answer in time: the caller counts in process.
func (s *shared) count(ctx context.Context, k attemptKey) (wait time.Duration, answered bool) {
	var ms int64
	answered = s.b.Do(ctx, func(ctx context.Context, c redis.UniversalClient) (err error) {
		ms, err = countScript.Run(ctx, c, keys(k), s.max, s.maxAll, s.window.Milliseconds()).Int64()
		return err
	})
	return time.Duration(ms) * time.Millisecond, answered
}

// record is local.record in Redis; answered is false when Redis did not
// answer in time: the caller records in process.
func (s *shared) record(ctx context.Context, k attemptKey, r Result) (answered bool) {
	switch r {
	case Failed:
		return s.b.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
			return failScript.Run(ctx, c, keys(k), s.window.Milliseconds()).Err()
		})
	case Succeeded:
		return s.b.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
			return c.Del(ctx, callerKey(k)).Err()
		})
	}
	return true
}
