package loginthrottle

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shebasvc/sheba/interceptors/ratelimit/redislimit"
	"github.com/shebasvc/sheba/interceptors/ratelimit/redislimit/redistest"
)

// newBackend returns a Backend on the server at url, as a replica has one,
// closed when the test ends. Its timeout is the most redis.timeout allows,
// not the 5 ms default: a test machine loaded by -race and other packages
// stalls for hundreds of milliseconds, which would send the throttle to
// its in-process counts by itself. The fallback test stops or pauses Redis
// outright.
func newBackend(t *testing.T, url string) *redislimit.Backend {
	t.Helper()
	client, err := redislimit.NewClient(url, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b := redislimit.New(client, redislimit.WithTimeout(time.Second), redislimit.WithProbeInterval(50*time.Millisecond))
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// TestShared checks that two replicas on one Redis share the counts, the
// refusals, the fresh start of a success and the giving back of an
// undecided attempt, and keep nothing in process meanwhile.
func TestShared(t *testing.T) {
	srv := redistest.Start(t)
	a := New(2, time.Minute, WithRedis(newBackend(t, srv.URL())))
	b := New(2, time.Minute, WithRedis(newBackend(t, srv.URL())))

	try(t, a, "alice", Failed)
	try(t, b, "alice", Failed)
	for _, th := range []*Throttle{a, b} {
		throttled, wait := try(t, th, "alice", Succeeded)
		if !throttled || wait <= 50*time.Second || wait > time.Minute {
			t.Errorf("after 2 failures on two replicas: throttled %v after %v, want true after about a minute", throttled, wait)
		}
	}
	if throttled, _ := try(t, a, "bob", Failed); throttled {
		t.Error("bob throttled by alice's failures")
	}

	wantResults(t, a, b)

	for _, th := range []*Throttle{a, b} {
		if n := th.local.byUsername.Len(); n != 0 {
			t.Errorf("%d usernames counted in process with Redis up, want none", n)
		}
	}
}

// TestSharedPerCaller checks the counts per caller and of all callers on
// two replicas sharing one Redis, and that they are kept there alone.
func TestSharedPerCaller(t *testing.T) {
	srv := redistest.Start(t)
	a := New(3, time.Minute, WithMaxAll(7), WithRedis(newBackend(t, srv.URL())))
	b := New(3, time.Minute, WithMaxAll(7), WithRedis(newBackend(t, srv.URL())))
	wantPerCaller(t, a, b)
	for _, th := range []*Throttle{a, b} {
		if n, m := th.local.byCaller.Len(), th.local.byUsername.Len(); n != 0 || m != 0 {
			t.Errorf("%d callers' and %d usernames' counts in process with Redis up, want none", n, m)
		}
	}
}

// TestSharedRace sends 30 failing logins for one username at once to two
// replicas: max get through, and at most one more.
func TestSharedRace(t *testing.T) {
	srv := redistest.Start(t)
	replicas := []*Throttle{
		New(3, time.Minute, WithRedis(newBackend(t, srv.URL()))),
		New(3, time.Minute, WithRedis(newBackend(t, srv.URL()))),
	}
	var passed atomic.Int64
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			a, err := replicas[i%2].Begin(t.Context(), "alice", "billing")
			if err != nil {
				return
			}
			passed.Add(1)
			a.End(t.Context(), Failed)
		})
	}
	wg.Wait()
	// Each replica lets one login of a username run at a time: at max−1
	// failures, both may let one through.
	if n := passed.Load(); n < 3 || n > 4 {
		t.Errorf("%d of 30 concurrent failing logins got through, want 3, or 4 (one more on the second replica)", n)
	}
	for i, th := range replicas {
		if n := th.local.byUsername.Len(); n != 0 {
			t.Errorf("replica %d counted %d usernames in process: Redis did not answer in time", i, n)
		}
	}
}

// TestSharedAtOnce checks that a login of a username that the other
// replica throttled is answered at once, even while a login of it, begun
// before, runs here: it does not wait for its turn.
func TestSharedAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	a := New(1, time.Minute, WithRedis(newBackend(t, srv.URL())))
	b := New(1, time.Minute, WithRedis(newBackend(t, srv.URL())))
	running, err := a.Begin(t.Context(), "alice", "billing")
	if err != nil {
		t.Fatal(err)
	}
	defer running.End(t.Context(), Undecided)
	try(t, b, "alice", Failed)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = a.Begin(ctx, "alice", "billing")
	wantThrottled(t, err)
}

// TestSharedWindow checks that the window in Redis ends: refused logins,
// sent all along, do not extend it.
func TestSharedWindow(t *testing.T) {
	srv := redistest.Start(t)
	th := New(1, 300*time.Millisecond, WithRedis(newBackend(t, srv.URL())))
	start := time.Now()
	try(t, th, "alice", Failed)
	for {
		throttled, wait := try(t, th, "alice", Failed)
		if !throttled {
			break
		}
		if wait > 300*time.Millisecond {
			t.Fatalf("told to wait %v, more than the window", wait)
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("still throttled 10s into a window of 300ms")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Redis's clock and ours may differ by a millisecond or so.
	if took := time.Since(start); took < 290*time.Millisecond {
		t.Errorf("throttle ended after %v, before the window of 300ms", took)
	}
}

// TestSharedFallback stops Redis: logins still answer, counted in process
// (where the throttle holds alone), and the backend is down; once Redis is
// back the counts are in Redis again. Then Redis hangs: a login answers
// within about the timeout, counted in process.
func TestSharedFallback(t *testing.T) {
	srv := redistest.Start(t)
	backend := newBackend(t, srv.URL())
	th := New(2, time.Minute, WithRedis(backend))
	try(t, th, "alice", Failed)

	srv.Stop()
	for i := range 2 {
		if throttled, _ := try(t, th, "bob", Failed); throttled {
			t.Fatalf("failure %d with Redis down throttled, want it counted in process", i+1)
		}
	}
	if throttled, _ := try(t, th, "bob", Failed); !throttled {
		t.Error("not throttled after 2 failures with Redis down")
	}
	if backend.Up() {
		t.Error("backend up with Redis stopped")
	}
	if n := th.local.byUsername.Len(); n != 1 {
		t.Errorf("%d usernames counted in process, want bob alone", n)
	}

	srv.Restart()
	waitUp(t, backend)
	// A restarted Redis is empty; what it counts now, it shares.
	try(t, th, "carol", Failed)
	if th.local.byUsername.Contains("carol") {
		t.Error("carol counted in process with Redis back")
	}

	srv.Pause()
	defer srv.Resume()
	start := time.Now()
	if throttled, _ := try(t, th, "dave", Failed); throttled {
		t.Error("dave throttled with Redis hung")
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("a login with Redis hung took %v, want about the timeout (1s)", took)
	}
	if !th.local.byUsername.Contains("dave") {
		t.Error("dave not counted in process with Redis hung")
	}
}

// waitUp waits up to 10 s for the probe to find Redis back.
func waitUp(t *testing.T, b *redislimit.Backend) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !b.Up(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("backend still down 10s after Redis came back")
		}
	}
}
