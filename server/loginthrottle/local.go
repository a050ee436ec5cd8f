package loginthrottle

import (
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// local counts failed logins in process. It is safe for concurrent use.
//
// Memory is bounded whatever usernames are sent: failed holds the counts
// of at most size usernames, in an LRU ordered by their last failure. At
// the bound, adding one forgets the username whose last failure is the
// oldest (its next login counts from 0). Only a failure, which costs a
// password hash, adds or moves an entry (a check only peeks), so pushing a
// username out takes size failures of other usernames after its last one:
// size hashes, which the hashing bound (one per core at a time,
// docs/operations.md#password-hashing) spreads over size × 25 ms / cores,
// about 20 minutes on 2 cores for 100 000, while the username gets max
// tries. Cheap calls (throttled, or shed before hashing) cannot churn it.
//
// golang-lru's simplelru is the bounded map. Its expirable LRU is not
// used: a window lasts from a username's first failure, not from its last
// change, and it runs a goroutine per cache that nothing stops.
type local struct {
	max    int
	window time.Duration

	mu     sync.Mutex
	failed *simplelru.LRU[string, failures]
}

// failures are a username's failed logins in its window, which ends at end.
type failures struct {
	n   int
	end time.Time
}

func newLocal(maxFailures int, window time.Duration, size int) *local {
	failed, err := simplelru.NewLRU[string, failures](max(size, 1), nil)
	if err != nil {
		// Only for a size below 1, which max rules out.
		panic("loginthrottle: " + err.Error())
	}
	return &local{max: maxFailures, window: window, failed: failed}
}

// count returns 0 when username may try at now, else how long until its
// window ends.
func (l *local) count(username string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, ok := l.failed.Peek(username)
	if !ok || !now.Before(f.end) || f.n < l.max {
		return 0
	}
	return f.end.Sub(now)
}

// record counts how a login of username ended at now: a failure adds one
// (starting a window if none runs), a success starts afresh.
func (l *local) record(username string, r Result, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch r {
	case Failed:
		f, ok := l.failed.Get(username)
		if !ok || !now.Before(f.end) {
			f = failures{end: now.Add(l.window)}
		}
		f.n++
		l.failed.Add(username, f)
	case Succeeded:
		l.failed.Remove(username)
	}
}
