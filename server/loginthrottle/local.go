package loginthrottle

import (
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// local counts failed logins in process. It is safe for concurrent use.
//
// Memory is bounded whatever usernames are sent. failed holds the counts
// of at most size usernames, in an LRU ordered by their last failure; at
// the bound, adding one forgets the username whose last failure is the
// oldest (its next login counts from 0). Only a failure, which costs a
// password hash, adds or moves an entry, and a Begin only peeks, so
// pushing a username out takes size failures of other usernames after its
// last one: size hashes, which the hashing bound (one per core at a time,
// docs/operations.md#password-hashing) spreads over size × 25 ms / cores
// (about 20 minutes on 2 cores for 100 000), while the username gets max
// tries. Cheap calls (throttled, or shed before hashing) cannot churn it.
// running holds the attempts between Begin and End, so that concurrent
// logins for one username cannot all pass; an entry lives only while a
// Login call runs, so it holds no more than the concurrency limit lets run
// (limits.max_inflight).
//
// golang-lru's simplelru is the bounded map. Its expirable LRU is not
// used: a window lasts from a username's first failure, not from its last
// change, and it runs a goroutine per cache that nothing stops.
type local struct {
	max    int
	window time.Duration

	mu      sync.Mutex
	failed  *simplelru.LRU[string, failures]
	running map[string]int
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
	return &local{max: maxFailures, window: window, failed: failed, running: map[string]int{}}
}

// begin counts an attempt for username at now and returns 0, or, when the
// username has max failures in its window or attempts running, how long
// until the window ends: all of it when no failure has started one yet.
func (l *local) begin(username string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.running[username]
	var end time.Time
	if f, ok := l.failed.Peek(username); ok && now.Before(f.end) {
		n += f.n
		end = f.end
	}
	if n >= l.max {
		if end.IsZero() {
			return l.window
		}
		return end.Sub(now)
	}
	l.running[username]++
	return 0
}

// end ends an attempt begun for username, at now.
func (l *local) end(username string, r Result, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.running[username]; n > 1 {
		l.running[username] = n - 1
	} else {
		delete(l.running, username)
	}
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
