package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/e2e/shebaproc"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// The hook's breaker counts the hook's own failures, not calls cut short by
// their callers' deadlines (docs/hook.md#circuit-breaker): one caller's
// short deadlines against a slow hook cannot give everyone 503 (failure
// mode closed) nor skip the hook for everyone (open).

// callerOf returns the API key id of the caller of a hook call, "" for none.
func callerOf(call map[string]any) string {
	c, _ := call["caller"].(map[string]any)
	id, _ := c["apiKeyId"].(string)
	return id
}

// TestHookBreakerShortDeadlines runs, under each failure mode, a caller
// (testKey) whose calls have deadlines of 100 ms against a hook that
// answers in 300 ms (hook.timeout 1 s), 8 at once all along, and another
// caller ("shop") with the default deadline, to whom the hook answers a
// break (403), so that its answer tells the hook's decision from a skip:
//
//   - while the breaker is closed, the short calls do not open it: the
//     other caller's calls get the hook's decision;
//   - the hook's own failures (500s) open it;
//   - once the hook answers again (slowly), the breaker closes by itself
//     although only short calls come (the trial call runs to the hook's
//     answer), and the other caller gets its decision. The short calls
//     used to take the half-open breaker's one trial call again and again,
//     each cut at 100 ms and deciding nothing: the breaker stayed half-open
//     and every other call was skipped (503, or no hook at all under open)
//     for as long as they came, unless it happened to take the trial.
func TestHookBreakerShortDeadlines(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{config.HookFailClosed, config.HookFailOpen} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			hookBreakerShortDeadlines(t, mode)
		})
	}
}

func hookBreakerShortDeadlines(t *testing.T, mode string) {
	const (
		hookDelay     = 300 * time.Millisecond
		shortDeadline = 100 * time.Millisecond
	)
	hook := startHookServer(t, "tcp")
	var failing atomic.Bool
	hook.answerWith(func(call map[string]any) (int, string) {
		if failing.Load() {
			return 500, ""
		}
		time.Sleep(hookDelay)
		if callerOf(call) == otherKeys[0].id {
			return 200, `{"control":{"break":403},"reason":"SEEN"}`
		}
		return 200, `{"control":"continue"}`
	})
	e := newTestEnv(t, withOtherKeys, withHook(hook.url, func(h *config.Hook) {
		h.Timeout = time.Second
		h.FailureMode = mode
	}))
	// The other caller's Ping, with the default deadline (limits.timeout):
	// the hook's decision is PermissionDenied HOOK_DENIED.
	other := func() *status.Status {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", otherKeys[0].key)
		_, err := e.ping.Ping(ctx, &shebav1.PingRequest{})
		return status.Convert(err)
	}
	decided := func(st *status.Status) bool {
		return st.Code() == codes.PermissionDenied && reason.Of(st) == reason.HookDenied
	}
	// The same on REST and Connect: one breaker serves every transport.
	otherElsewhere := func(what string) {
		t.Helper()
		r := e.do(t, http.MethodGet, "/v1/ping", "", "X-Api-Key", otherKeys[0].key)
		wantRESTDetails(t, what+", REST", r, http.StatusForbidden, reason.HookDenied)
		a := browserCall[shebav1.PingRequest, shebav1.PingResponse](t, e, "connect-json", shebav1.PingService_Ping_FullMethodName, &shebav1.PingRequest{}, otherKeys[0].key)
		if !decided(a.st) {
			t.Errorf("%s, Connect: got %v %q (%s), want the hook's break", what, a.st.Code(), a.st.Message(), reason.Of(a.st))
		}
	}

	// The short calls, 8 at once until the test ends (at most 2 minutes,
	// and 100 000 calls each).
	ctx, stop := context.WithTimeout(t.Context(), 2*time.Minute)
	var wg sync.WaitGroup
	var short atomic.Int64
	defer func() {
		stop()
		wg.Wait()
		t.Logf("%s: %d short calls", mode, short.Load())
	}()
	for range 8 {
		wg.Go(func() {
			for i := 0; i < 100_000 && ctx.Err() == nil; i++ {
				c, cancel := context.WithTimeout(ctx, shortDeadline)
				_, _ = e.ping.Ping(c, &shebav1.PingRequest{})
				cancel()
				short.Add(1)
			}
		})
	}
	time.Sleep(time.Second)
	for i := range 3 {
		if st := other(); !decided(st) {
			t.Fatalf("%s, breaker closed, the other caller's call %d: got %v %q (%s), want the hook's break", mode, i, st.Code(), st.Message(), reason.Of(st))
		}
	}
	otherElsewhere(mode + ", breaker closed, the other caller")
	if n := series(e.scrape(t), "sheba_hook_requests_total", "result")["result=skipped"]; n != 0 {
		t.Errorf("%s: %v calls skipped while the short calls ran against a working hook, want none: the breaker opened", mode, n)
	}

	// The hook's own failures open the breaker.
	failing.Store(true)
	waitFor(t, 30*time.Second, mode+": the breaker open after the hook answered 500", func() bool {
		if series(e.scrape(t), "sheba_hook_requests_total", "result")["result=skipped"] > 0 {
			return true
		}
		other()
		return false
	})

	// The hook answers again: the breaker tries it 2 s after it opened,
	// and closes, with none but the short calls coming meanwhile.
	failing.Store(false)
	start := time.Now()
	closed := func() bool {
		for line := range strings.SplitSeq(e.logs.String(), "\n") {
			if strings.Contains(line, `"msg":"external hook circuit breaker changed state"`) && strings.Contains(line, `"to":"closed"`) {
				return true
			}
		}
		return false
	}
	for !closed() {
		if time.Since(start) > 30*time.Second {
			got := map[string]int{}
			for range 10 {
				st := other()
				got[fmt.Sprintf("%v %s", st.Code(), reason.Of(st))]++
			}
			t.Fatalf("%s: the breaker did not close within 30s of the hook answering again, with short calls alone coming; then 10 calls of the other caller got %v", mode, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%s: the breaker closed %v after the hook answered again, with short calls alone coming", mode, time.Since(start).Round(time.Millisecond))
	for i := range 3 {
		start := time.Now()
		st := other()
		t.Logf("%s: the other caller's call %d after: %v %s in %v", mode, i, st.Code(), reason.Of(st), time.Since(start).Round(time.Millisecond))
		if !decided(st) {
			t.Errorf("%s, breaker closed again, the other caller's call %d: got %v %q, want the hook's break", mode, i, st.Code(), st.Message())
		}
	}
	otherElsewhere(mode + ", breaker closed again, the other caller")
}

// TestHookBreakerOpensOnHookFailures checks that the hook's own failures
// still open the breaker, under each failure mode: a 5xx, a refused
// connection, an answer slower than hook.timeout. After 5 failures in a row
// the next calls are skipped (503 HOOK_UNAVAILABLE under closed, the call
// goes on under open).
func TestHookBreakerOpensOnHookFailures(t *testing.T) {
	t.Parallel()
	for _, failure := range []string{"5xx", "refused", "hook.timeout"} {
		for _, mode := range []string{config.HookFailClosed, config.HookFailOpen} {
			t.Run(failure+" "+mode, func(t *testing.T) {
				t.Parallel()
				var url string
				switch failure {
				case "refused":
					url = "http://" + shebaproc.FreeAddr(t) + "/check"
				default:
					hook := startHookServer(t, "tcp")
					hook.answerWith(func(map[string]any) (int, string) {
						if failure == "5xx" {
							return 503, ""
						}
						time.Sleep(300 * time.Millisecond)
						return 200, `{"control":"continue"}`
					})
					url = hook.url
				}
				e := newTestEnv(t, withHook(url, func(h *config.Hook) {
					h.Timeout = 100 * time.Millisecond
					h.FailureMode = mode
				}))
				want := codes.Unavailable
				if mode == config.HookFailOpen {
					want = codes.OK
				}
				for i := range 10 {
					_, err := e.ping.Ping(t.Context(), &shebav1.PingRequest{})
					if status.Code(err) != want {
						t.Fatalf("call %d: got %v, want %v", i, err, want)
					}
				}
				results := series(e.scrape(t), "sheba_hook_requests_total", "result")
				if results["result=error"] != 5 || results["result=skipped"] != 5 {
					t.Errorf("got %v, want 5 errors, then 5 skipped: the breaker opens after 5 failures", results)
				}
			})
		}
	}
}
