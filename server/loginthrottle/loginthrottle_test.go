package loginthrottle

import (
	"context"
	"errors"
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

// try runs one login for username by the caller "billing" that ends with
// r, unless it is throttled: then it returns the retry-after the call was
// told.
func try(t *testing.T, th *Throttle, username string, r Result) (throttled bool, wait time.Duration) {
	t.Helper()
	return tryAs(t, th, username, "billing", r)
}

// tryAs is try by caller.
func tryAs(t *testing.T, th *Throttle, username, caller string, r Result) (throttled bool, wait time.Duration) {
	t.Helper()
	ci := &callinfo.Info{}
	a, err := th.Begin(callinfo.NewContext(t.Context(), ci), username, caller)
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
		t.Error("dave throttled after 5 undecided attempts and 1 failure, want them not counted")
	}
}

// TestPerCaller checks that failures count per caller: one caller's
// failures throttle its own logins for the username, not another's, nor
// does another's success let it in again; and that the failures of all
// callers together, at maxAll, throttle every caller, the first to fail
// and one that never did alike.
func TestPerCaller(t *testing.T) {
	th := withClock(New(3, time.Minute, WithMaxAll(7)), newClock())
	wantPerCaller(t, th, th)
}

// wantPerCaller checks, on throttles of 3 failures of a caller and 7 of
// all callers a window that share their counts (one throttle twice, or two
// replicas on one Redis), the rules of TestPerCaller.
func wantPerCaller(t *testing.T, a, b *Throttle) {
	t.Helper()
	for i := range 3 {
		if throttled, _ := tryAs(t, a, "alice", "key-a", Failed); throttled {
			t.Fatalf("key-a's failure %d throttled, want the first 3 to pass", i+1)
		}
	}
	if throttled, wait := tryAs(t, b, "alice", "key-a", Succeeded); !throttled || wait <= 0 {
		t.Errorf("key-a after its 3 failures: throttled %v, retry after %v; want throttled", throttled, wait)
	}
	if throttled, _ := tryAs(t, b, "alice", "key-b", Succeeded); throttled {
		t.Error("key-b's login for alice throttled by key-a's failures")
	}
	if throttled, _ := tryAs(t, a, "alice", "key-a", Succeeded); !throttled {
		t.Error("key-a let in by key-b's success")
	}
	// 3 failures so far; 4 more over other callers reach the ceiling.
	for i, caller := range []string{"key-b", "key-c", "key-c", "key-d"} {
		if throttled, _ := tryAs(t, []*Throttle{a, b}[i%2], "alice", caller, Failed); throttled {
			t.Fatalf("failure %d of all callers (by %s) throttled, want 7 to pass", 4+i, caller)
		}
	}
	for _, caller := range []string{"key-b", "key-e", ""} {
		if throttled, wait := tryAs(t, b, "alice", caller, Succeeded); !throttled || wait <= 0 {
			t.Errorf("%q after 7 failures of all callers: throttled %v, retry after %v; want throttled", caller, throttled, wait)
		}
	}
	if throttled, _ := tryAs(t, a, "bob", "key-a", Failed); throttled {
		t.Error("bob throttled by alice's failures")
	}
}

// TestCeilingWindow checks the windows of the two counts: a caller's
// success starts its own count afresh but leaves the count of all callers
// to its window, whose end is the retry-after of the logins it throttles,
// and after which every caller may log in again.
func TestCeilingWindow(t *testing.T) {
	c := newClock()
	th := withClock(New(2, 10*time.Second, WithMaxAll(3)), c)
	tryAs(t, th, "alice", "key-a", Failed)
	c.advance(2 * time.Second)
	tryAs(t, th, "alice", "key-b", Failed)
	tryAs(t, th, "alice", "key-b", Succeeded)
	c.advance(2 * time.Second)
	tryAs(t, th, "alice", "key-c", Failed)
	// Three failures of all callers, the first 4 s ago.
	if throttled, wait := tryAs(t, th, "alice", "key-b", Succeeded); !throttled || wait != 6*time.Second {
		t.Errorf("after 3 failures of all callers: throttled %v, retry after %v; want true after 6s", throttled, wait)
	}
	c.advance(6 * time.Second)
	if throttled, _ := tryAs(t, th, "alice", "key-b", Succeeded); throttled {
		t.Error("throttled when the window of all callers has passed")
	}
}

// TestDefaultCeiling checks that the ceiling is 10 times a caller's
// limit unless set.
func TestDefaultCeiling(t *testing.T) {
	th := New(2, time.Minute)
	for i := range 20 {
		if throttled, _ := tryAs(t, th, "alice", fmt.Sprintf("key-%d", i), Failed); throttled {
			t.Fatalf("failure %d of 20, each by another caller, throttled", i+1)
		}
	}
	if throttled, _ := tryAs(t, th, "alice", "key-new", Succeeded); !throttled {
		t.Error("not throttled after 20 failures of all callers, 10 times the 2 of one")
	}
}

// TestTurns checks that logins of one username take turns: while one
// runs, the next waits (here past its deadline: it gets the context's
// error), and runs once it has ended; nothing is left of a line when its
// logins have ended.
func TestTurns(t *testing.T) {
	th := New(3, time.Minute)
	first, err := th.Begin(t.Context(), "carol", "billing")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := th.Begin(ctx, "carol", "billing"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second login while the first runs: got %v, want it to wait past its deadline", err)
	}
	first.End(t.Context(), Succeeded)
	if throttled, _ := try(t, th, "carol", Failed); throttled {
		t.Error("throttled after a success")
	}
	if n := len(th.gate.lines); n != 0 {
		t.Errorf("%d lines left after every login ended, want none", n)
	}
}

// TestLastTurn checks the last turn: a login that waits for it is judged
// by the count the one running leaves; one more is ErrBusy when the line
// is full; other usernames do not wait.
func TestLastTurn(t *testing.T) {
	th := New(1, time.Minute, WithMaxWaiting(1))
	first, err := th.Begin(t.Context(), "alice", "billing")
	if err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() {
		a, err := th.Begin(t.Context(), "alice", "billing")
		a.End(t.Context(), Undecided)
		second <- err
	}()
	waitRefs(t, th, attemptKey{"alice", "billing"}, 2)
	if _, err := th.Begin(t.Context(), "alice", "billing"); !errors.Is(err, ErrBusy) {
		t.Errorf("third login with one waiting already: got %v, want ErrBusy", err)
	}
	if _, err := th.Begin(t.Context(), "bob", "billing"); err != nil {
		t.Errorf("bob waits for alice's turn: %v", err)
	}
	// Another caller's login for alice has a line of its own.
	if _, err := th.Begin(t.Context(), "alice", "shop"); err != nil {
		t.Errorf("another caller's login for alice waits for billing's turn: %v", err)
	}
	select {
	case err := <-second:
		t.Fatalf("second login did not wait for the first: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	first.End(t.Context(), Failed)
	wantThrottled(t, <-second)
	if n := len(th.gate.lines); n != 2 {
		t.Errorf("%d lines left, want bob's and shop's alone (their attempts were not ended)", n)
	}
}

// waitRefs waits up to 5 s until k's line holds n logins, running or
// waiting.
func waitRefs(t *testing.T, th *Throttle, k attemptKey, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		th.gate.mu.Lock()
		got := 0
		if l := th.gate.lines[k]; l != nil {
			got = l.refs
		}
		th.gate.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v's line holds %d logins after 5s, want %d", k, got, n)
		}
	}
}

// TestRace sends 30 failing logins for one username at once, then 30
// succeeding ones for another: exactly max of the first get through,
// however they interleave, and all of the others do (logins at once are
// not failures).
func TestRace(t *testing.T) {
	th := New(3, time.Minute)
	for _, test := range []struct {
		username string
		result   Result
		want     int64
	}{{"alice", Failed, 3}, {"bob", Succeeded, 30}} {
		var passed atomic.Int64
		var wg sync.WaitGroup
		for range 30 {
			wg.Go(func() {
				a, err := th.Begin(t.Context(), test.username, "billing")
				if err != nil {
					return
				}
				passed.Add(1)
				runtime.Gosched()
				a.End(t.Context(), test.result)
			})
		}
		wg.Wait()
		if n := passed.Load(); n != test.want {
			t.Errorf("%d of 30 concurrent logins of %s got through, want %d", n, test.username, test.want)
		}
	}
	if n := len(th.gate.lines); n != 0 {
		t.Errorf("%d lines left after every login ended, want none", n)
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
	if n, m := th.local.byCaller.Len(), th.local.byUsername.Len(); n != 3 || m != 3 {
		t.Fatalf("%d callers' and %d usernames' counts kept, want 3 of each", n, m)
	}
	// One more failing username pushes out alice, the oldest failure.
	try(t, th, "dave", Failed)
	if th.local.byUsername.Contains("alice") || !th.local.byUsername.Contains("bob") ||
		th.local.byCaller.Contains(attemptKey{"alice", "billing"}) || !th.local.byCaller.Contains(attemptKey{"bob", "billing"}) {
		t.Errorf("kept %v and %v, want alice forgotten first", th.local.byCaller.Keys(), th.local.byUsername.Keys())
	}
	if throttled, _ := try(t, th, "alice", Failed); throttled {
		t.Error("alice still throttled after being forgotten")
	}
}

// TestLocalMemory measures the in-process counts at their bound, with the
// longest usernames, for the size stated at defaultSize: however many
// callers fail, each count holds at most defaultSize entries.
func TestLocalMemory(t *testing.T) {
	th := New(10, time.Hour)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	callers := []string{"billing", "shop", "mobile-app"}
	for i := range defaultSize + 1000 {
		tryAs(t, th, fmt.Sprintf("%064d", i), callers[i%len(callers)], Failed)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n, m := th.local.byCaller.Len(), th.local.byUsername.Len(); n != defaultSize || m != defaultSize {
		t.Fatalf("%d callers' and %d usernames' counts kept, want %d of each", n, m, defaultSize)
	}
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d usernames of 64 characters, with their callers: %.1f MiB, %d bytes each", defaultSize, float64(grown)/(1<<20), grown/defaultSize)
	if grown > 64<<20 {
		t.Errorf("the counts hold %.1f MiB at their bound, want under 64 MiB", float64(grown)/(1<<20))
	}
	runtime.KeepAlive(th)
}
