package loginthrottle

import (
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// local counts failed logins in process. It is safe for concurrent use.
//
// It keeps two counts of a failure: the one of its username and caller
// (byCaller, bounded by max) and the one of its username across callers
// (byUsername, bounded by maxAll). Memory is bounded whatever usernames
// and callers are sent: each count is an LRU of at most size entries,
// ordered by their last failure, so the pairs cost no more than the
// usernames did, whatever the number of API keys. At the bound, adding one
// forgets the entry whose last failure is the oldest (its next login
// counts from 0). Only a failure, which costs a password hash, adds or
// moves an entry (a check only peeks), so pushing one out takes size
// failures of other usernames (or callers) after its last one: size
// hashes, which the hashing bound (one per core at a time,
// docs/operations.md#password-hashing) spreads over size × 25 ms / cores,
// about 20 minutes on 2 cores for 100 000, while the entry gets its limit
// of tries. Cheap calls (throttled, or shed before hashing) cannot churn
// them.
//
// golang-lru's simplelru is the bounded map. Its expirable LRU is not
// used: a window lasts from the first failure, not from the last change,
// and it runs a goroutine per cache that nothing stops.
type local struct {
	max, maxAll int
	window      time.Duration

	mu         sync.Mutex
	byCaller   *simplelru.LRU[attemptKey, failures]
	byUsername *simplelru.LRU[string, failures]
}

// failures are the failed logins of a window, which ends at end.
type failures struct {
	n   int
	end time.Time
}

func newLocal(maxFailures, maxAll int, window time.Duration, size int) *local {
	return &local{
		max: maxFailures, maxAll: maxAll, window: window,
		byCaller:   newLRU[attemptKey](size),
		byUsername: newLRU[string](size),
	}
}

// newLRU returns an LRU of at most size counts (at least 1).
func newLRU[K comparable](size int) *simplelru.LRU[K, failures] {
	lru, err := simplelru.NewLRU[K, failures](max(size, 1), nil)
	if err != nil {
		// Only for a size below 1, which max rules out.
		panic("loginthrottle: " + err.Error())
	}
	return lru
}

// count returns 0 when k may try at now, else how long until the window
// that throttles it ends (the later, if both do).
func (l *local) count(k attemptKey, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	mine, _ := l.byCaller.Peek(k)
	all, _ := l.byUsername.Peek(k.username)
	return max(mine.left(l.max, now), all.left(l.maxAll, now))
}

// left returns how long f throttles at now, with limit failures a window:
// 0 when it does not.
func (f failures) left(limit int, now time.Time) time.Duration {
	if f.n < limit || !now.Before(f.end) {
		return 0
	}
	return f.end.Sub(now)
}

// record counts how a login of k ended at now: a failure adds one to both
// counts (starting a window where none runs); a success starts k afresh,
// and leaves the count across callers to its window: it proves the
// password known to this caller, not that the others' failures were not
// guesses.
func (l *local) record(k attemptKey, r Result, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch r {
	case Failed:
		mine, _ := l.byCaller.Get(k)
		l.byCaller.Add(k, mine.add(l.window, now))
		all, _ := l.byUsername.Get(k.username)
		l.byUsername.Add(k.username, all.add(l.window, now))
	case Succeeded:
		l.byCaller.Remove(k)
	}
}

// add returns f with one more failure at now, in a new window if f's has
// ended.
func (f failures) add(window time.Duration, now time.Time) failures {
	if !now.Before(f.end) {
		f = failures{end: now.Add(window)}
	}
	f.n++
	return f
}
