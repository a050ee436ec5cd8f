package loginthrottle

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/interceptors/callinfo"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// clock is a fake time for the in-process counts.
type clock struct{ t time.Time }

func newClock() *clock { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) now() time.Time { return c.t }

func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// withClock makes th count by c.
func withClock(th *Throttle, c *clock) *Throttle {
	th.now = c.now
	return th
}

// try runs one login for username that ends with r, unless it is
// throttled: then it returns the retry-after the call was told.
func try(t *testing.T, th *Throttle, username string, r Result) (throttled bool, wait time.Duration) {
	t.Helper()
	ci := &callinfo.Info{}
	a, err := th.Begin(callinfo.NewContext(t.Context(), ci), username)
	if err != nil {
		wantThrottled(t, err)
		return true, ci.RetryAfter
	}
	a.End(t.Context(), r)
	return false, 0
}

// wantThrottled checks the answer of a throttled login.
func wantThrottled(t *testing.T, err error) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || reason.Of(st) != reason.LoginThrottled ||
		st.Message() != "too many failed logins for this username; retry later" {
		t.Fatalf("got %v (reason %q), want ResourceExhausted LOGIN_THROTTLED", err, reason.Of(st))
	}
}

// TestThrottle checks the rule: after max failures within the window the
// username is refused, with the rest of the window to wait, until the
// window has passed, and refused logins do not extend it; other usernames
// are not affected.
func TestThrottle(t *testing.T) {
	c := newClock()
	th := withClock(New(3, 10*time.Second), c)
	for i := range 3 {
		if throttled, _ := try(t, th, "alice", Failed); throttled {
			t.Fatalf("failure %d throttled, want the first 3 to pass", i+1)
		}
		c.advance(time.Second)
	}
	// The window started at the first failure, 3 s ago.
	for _, step := range []struct {
		after time.Duration
		want  time.Duration
	}{{0, 7 * time.Second}, {4 * time.Second, 3 * time.Second}, {2500 * time.Millisecond, 500 * time.Millisecond}} {
		c.advance(step.after)
		throttled, wait := try(t, th, "alice", Succeeded)
		if !throttled || wait != step.want {
			t.Fatalf("throttled %v, retry after %v; want true, %v", throttled, wait, step.want)
		}
	}
	if throttled, _ := try(t, th, "bob", Failed); throttled {
		t.Error("bob throttled by alice's failures")
	}
	c.advance(500 * time.Millisecond)
	if throttled, _ := try(t, th, "alice", Failed); throttled {
		t.Error("alice still throttled when the window has passed")
	}
	// That failure started a new window, of one failure.
	for range 2 {
		try(t, th, "alice", Failed)
	}
	if throttled, wait := try(t, th, "alice", Failed); !throttled || wait != 10*time.Second {
		t.Errorf("new window: throttled %v after %v, want true after 10s", throttled, wait)
	}
	if got := testutil.ToFloat64(th.throttled); got != 4 {
		t.Errorf("sheba_login_throttled_total %v, want 4", got)
	}
}

// TestResults checks what each end of an attempt does to the count.
func TestResults(t *testing.T) {
	th := withClock(New(2, time.Minute), newClock())
	wantResults(t, th, th)
}

// wantResults checks, on throttles of 2 failures a window that share their
// counts (one throttle twice, or two replicas on one Redis), that a success
// starts the count afresh and an undecided attempt counts for nothing.
func wantResults(t *testing.T, a, b *Throttle) {
	t.Helper()
	try(t, a, "carol", Failed)
	try(t, b, "carol", Succeeded)
	try(t, a, "carol", Failed)
	if throttled, _ := try(t, b, "carol", Failed); throttled {
		t.Error("carol throttled after 1 failure since a success, want the success to start afresh")
	}
	if throttled, _ := try(t, a, "carol", Failed); !throttled {
		t.Error("carol not throttled after 2 failures")
	}

	for range 5 {
		try(t, a, "dave", Undecided)
	}
	try(t, b, "dave", Failed)
	if throttled, _ := try(t, a, "dave", Undecided); throttled {
		t.Error("dave throttled after 5 undecided attempts and 1 failure, want them given back")
	}
}

// TestConcurrent checks that attempts running count: max logins at once
// for one username take the whole allowance, the next is refused for the
// window, and one given back frees a place.
func TestConcurrent(t *testing.T) {
	c := newClock()
	th := withClock(New(3, time.Minute), c)
	var running []Attempt
	for i := range 3 {
		a, err := th.Begin(t.Context(), "alice")
		if err != nil {
			t.Fatalf("attempt %d: %v", i+1, err)
		}
		running = append(running, a)
	}
	if throttled, wait := try(t, th, "alice", Failed); !throttled || wait != time.Minute {
		t.Fatalf("4th attempt while 3 run: throttled %v after %v, want true after the window", throttled, wait)
	}
	running[0].End(t.Context(), Undecided)
	running[1].End(t.Context(), Failed)
	a, err := th.Begin(t.Context(), "alice")
	if err != nil {
		t.Fatalf("attempt after one was given back: %v", err)
	}
	a.End(t.Context(), Failed)
	running[2].End(t.Context(), Failed)
	if throttled, _ := try(t, th, "alice", Failed); !throttled {
		t.Error("not throttled after 3 failures")
	}
	if n := len(th.local.running); n != 0 {
		t.Errorf("%d usernames still have attempts running, want none", n)
	}
}

// TestRace sends 50 failing logins for one username at once: exactly max
// get through, however they interleave.
func TestRace(t *testing.T) {
	th := New(3, time.Minute)
	var passed atomic.Int64
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			a, err := th.Begin(t.Context(), "alice")
			if err != nil {
				return
			}
			passed.Add(1)
			runtime.Gosched()
			a.End(t.Context(), Failed)
		})
	}
	wg.Wait()
	if n := passed.Load(); n != 3 {
		t.Errorf("%d of 50 concurrent failing logins got through, want 3", n)
	}
}

// TestOff checks that max 0 lets every login go on.
func TestOff(t *testing.T) {
	th := New(0, time.Minute)
	for i := range 100 {
		if throttled, _ := try(t, th, "alice", Failed); throttled {
			t.Fatalf("failure %d throttled with the throttle off", i+1)
		}
	}
}

// TestBound checks what happens at the bound: the username whose last
// failure is the oldest is forgotten, and calls that cost no hash (refused,
// or given back) neither add usernames nor save one from being forgotten.
func TestBound(t *testing.T) {
	c := newClock()
	th := withClock(New(2, time.Hour, WithSize(3)), c)
	for _, u := range []string{"alice", "alice", "bob", "carol"} {
		try(t, th, u, Failed)
		c.advance(time.Second)
	}
	// alice is throttled; a flood of cheap calls changes nothing.
	for i := range 1000 {
		if throttled, _ := try(t, th, "alice", Succeeded); !throttled {
			t.Fatal("alice not throttled")
		}
		try(t, th, fmt.Sprintf("shed-%d", i), Undecided)
	}
	if n := th.local.failed.Len(); n != 3 {
		t.Fatalf("%d usernames kept, want 3", n)
	}
	// One more failing username pushes out alice, the oldest failure.
	try(t, th, "dave", Failed)
	if th.local.failed.Contains("alice") || !th.local.failed.Contains("bob") {
		t.Errorf("kept %v, want alice forgotten first", th.local.failed.Keys())
	}
	if throttled, _ := try(t, th, "alice", Failed); throttled {
		t.Error("alice still throttled after being forgotten")
	}
}

// TestLocalMemory measures the in-process counts at their bound, with the
// longest usernames, for the size stated at defaultSize.
func TestLocalMemory(t *testing.T) {
	th := New(10, time.Hour)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range defaultSize + 1000 {
		try(t, th, fmt.Sprintf("%064d", i), Failed)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n := th.local.failed.Len(); n != defaultSize {
		t.Fatalf("%d usernames kept, want %d", n, defaultSize)
	}
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d usernames of 64 characters: %.1f MiB, %d bytes each", defaultSize, float64(grown)/(1<<20), grown/defaultSize)
	if grown > 32<<20 {
		t.Errorf("the counts hold %.1f MiB at their bound, want under 32 MiB", float64(grown)/(1<<20))
	}
	runtime.KeepAlive(th)
}
