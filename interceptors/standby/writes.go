package standby

import (
	"sync/atomic"
	"time"
)

// writes remembers, for each caller, when its last write ended, for ttl:
// its reads go to the primary meanwhile. The callers are known at start
// (the API key ids and the anonymous caller ""), so it holds one clock
// reading for each and never grows; a caller it does not know is not
// remembered. It is safe for concurrent use, without a lock.
type writes struct {
	ttl   time.Duration
	epoch time.Time
	// last holds, for each caller, the end of its last write on the clock
	// of now, plus one (0: none yet).
	last map[string]*atomic.Int64
	// now is the time on the clock: since epoch, monotonic.
	now func() time.Duration
}

func newWrites(callers []string, ttl time.Duration, now func() time.Duration) *writes {
	w := &writes{ttl: ttl, epoch: time.Now(), last: make(map[string]*atomic.Int64, len(callers)+1), now: now}
	if w.now == nil {
		w.now = func() time.Duration { return time.Since(w.epoch) }
	}
	for _, c := range append([]string{""}, callers...) {
		w.last[c] = new(atomic.Int64)
	}
	return w
}

// record notes that caller's write ended now.
func (w *writes) record(caller string) {
	if last := w.last[caller]; last != nil {
		last.Store(int64(w.now()) + 1)
	}
}

// recent reports whether caller's last write ended less than ttl ago.
func (w *writes) recent(caller string) bool {
	last := w.last[caller]
	if last == nil {
		return false
	}
	end := last.Load()
	return end != 0 && w.now()-time.Duration(end-1) < w.ttl
}
