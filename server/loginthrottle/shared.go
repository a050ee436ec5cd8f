package loginthrottle

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shebasvc/sheba/interceptors/ratelimit/redislimit"
)

// shared counts failed logins in Redis: one key per username,
// "sheba:login:<username>", holding its failures of the window and
// expiring with it, so Redis holds only the usernames that failed within
// the last window. A count, a failure and a success are one round trip
// each. It is safe for concurrent use.
//
// redis_rate (the rate limits' GCRA) does not fit: after max failures it
// would let one more login through every window/max, where the throttle
// refuses them until the window has passed. The two scripts below are
// ours for that reason; each keeps its step atomic.
type shared struct {
	b      *redislimit.Backend
	max    int
	window time.Duration
}

func newShared(b *redislimit.Backend, maxFailures int, window time.Duration) *shared {
	return &shared{b: b, max: maxFailures, window: window}
}

// countScript returns 0 when the count at KEYS[1] is below ARGV[1] (max),
// else the ms left of its window (ARGV[2], the window in ms, to a count
// that has lost its expiry, which sheba never writes).
var countScript = redis.NewScript(`
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n < tonumber(ARGV[1]) then
  return 0
end
local left = redis.call('PTTL', KEYS[1])
if left > 0 then
  return left
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return tonumber(ARGV[2])
`)

// failScript counts a failure at KEYS[1]; the first starts the window of
// ARGV[1] ms.
var failScript = redis.NewScript(`
if redis.call('INCR', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return 0
`)

func key(username string) string { return "sheba:login:" + username }

// count is local.count in Redis; answered is false when Redis did not
// answer in time: the caller counts in process.
func (s *shared) count(ctx context.Context, username string) (wait time.Duration, answered bool) {
	var ms int64
	answered = s.b.Do(ctx, func(ctx context.Context, c redis.UniversalClient) (err error) {
		ms, err = countScript.Run(ctx, c, []string{key(username)}, s.max, s.window.Milliseconds()).Int64()
		return err
	})
	return time.Duration(ms) * time.Millisecond, answered
}

// record is local.record in Redis; answered is false when Redis did not
// answer in time: the caller records in process.
func (s *shared) record(ctx context.Context, username string, r Result) (answered bool) {
	switch r {
	case Failed:
		return s.b.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
			return failScript.Run(ctx, c, []string{key(username)}, s.window.Milliseconds()).Err()
		})
	case Succeeded:
		return s.b.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
			return c.Del(ctx, key(username)).Err()
		})
	}
	return true
}
