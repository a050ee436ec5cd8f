package e2e

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/ratelimit/redislimit/redistest"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/interceptors/retryafter"
)

// The login throttle (docs/api.md#login): after limits.login_failures.max
// failures within the window, logins for that username answer 429
// LOGIN_THROTTLED with Retry-After until the window has passed, the same
// for a username that exists and one that does not.

// throttleMax is limits.login_failures.max in these tests.
const throttleMax = 3

// withLoginThrottle sets limits.login_failures to throttleMax per window,
// with patientLogins.
func withLoginThrottle(window time.Duration) func(*config.Config) {
	return func(c *config.Config) {
		patientLogins(c)
		c.Limits.LoginFailures = config.LoginFailures{Max: throttleMax, Window: window}
	}
}

// patientLogins sets limits.timeout to a minute for the tests that send
// many failed logins at once: each is an argon2id hash of about 25 ms
// queued behind the others, and on a CI machine busy with the other
// packages' tests 20 of them once took longer than the default 5 s; a
// login cut by its deadline may or may not have counted its failure, so
// the throttle the test then checks would be off by one.
func patientLogins(c *config.Config) {
	c.Limits.Timeout = time.Minute
}

// loginBody is the REST body of a login.
func loginBody(username, password string) string {
	return fmt.Sprintf(`{"username":%q,"password":%q}`, username, password)
}

// failLogins sends n logins with a wrong password for each username at
// once, over gRPC with testKey, and checks that each fails as a plain
// failed login.
func failLogins(t *testing.T, e *testEnv, n int, usernames ...string) {
	t.Helper()
	failLoginsAs(t, e, testKey, n, usernames...)
}

// failLoginsAs is failLogins with key.
func failLoginsAs(t *testing.T, e *testEnv, key string, n int, usernames ...string) {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", key)
	var wg sync.WaitGroup
	for _, u := range usernames {
		for range n {
			wg.Go(func() {
				_, err := e.account.Login(ctx, &shebav1.LoginRequest{Username: u, Password: "wrong password"})
				if st := status.Convert(err); st.Code() != codes.Unauthenticated || reason.Of(st) != reason.LoginFailed {
					t.Errorf("failed login of %s: got %v (%s), want UNAUTHENTICATED LOGIN_FAILED", u, err, reason.Of(st))
				}
			})
		}
	}
	wg.Wait()
}

// throttledAnswer is what a client sees of one throttled login on both
// transports.
type throttledAnswer struct {
	grpc          *status.Status
	header, trail metadata.MD
	rest          restResponse
}

// loginBoth sends one login on gRPC and one on REST, with testKey.
func loginBoth(t *testing.T, e *testEnv, username, password string) throttledAnswer {
	t.Helper()
	return loginBothAs(t, e, testKey, username, password)
}

// loginBothAs is loginBoth with key.
func loginBothAs(t *testing.T, e *testEnv, key, username, password string) throttledAnswer {
	t.Helper()
	var a throttledAnswer
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", key)
	_, err := e.account.Login(ctx, &shebav1.LoginRequest{Username: username, Password: password}, grpc.Header(&a.header), grpc.Trailer(&a.trail))
	a.grpc = status.Convert(err)
	a.rest = e.do(t, http.MethodPost, "/v1/accounts:login", loginBody(username, password), "X-Api-Key", key)
	return a
}

// wantThrottled checks a throttled answer on both transports: 429 /
// RESOURCE_EXHAUSTED, reason LOGIN_THROTTLED, RetryInfo and retry-after of
// the same whole seconds, at most the window. It returns the retry-after
// of each.
func wantThrottled(t *testing.T, what string, a throttledAnswer, window time.Duration) (grpcWait, restWait int) {
	t.Helper()
	wantGRPCDetails(t, what+" gRPC", a.grpc.Err(), a.header, codes.ResourceExhausted, reason.LoginThrottled)
	wantRESTDetails(t, what+" REST", a.rest, http.StatusTooManyRequests, reason.LoginThrottled)
	grpcWait, _ = strconv.Atoi(strings.Join(a.header.Get(retryafter.Key), ""))
	restWait, _ = strconv.Atoi(a.rest.Header.Get("Retry-After"))
	limit := int(retryafter.Seconds(window))
	for _, w := range []int{grpcWait, restWait} {
		if w < 1 || w > limit {
			t.Errorf("%s: retry after %d s, want 1 to %d (the window)", what, w, limit)
		}
	}
	return grpcWait, restWait
}

// sameThrottled checks that the throttled answers for two usernames are
// the same to the byte, on both transports, but for what differs on any
// two answers (the request id, the Date) and the seconds left of each
// username's window, whose two windows started a moment apart: those must
// differ by a second at most.
func sameThrottled(t *testing.T, known, unknown throttledAnswer, window time.Duration) {
	t.Helper()
	kg, kr := wantThrottled(t, "known username", known, window)
	ug, ur := wantThrottled(t, "unknown username", unknown, window)
	if d := kg - ug; d < -1 || d > 1 || kr-ur < -1 || kr-ur > 1 {
		t.Errorf("retry-after: known %d/%d s, unknown %d/%d s (gRPC/REST), want within a second", kg, kr, ug, ur)
	}
	if diff := cmp.Diff(withoutDelay(t, known.grpc), withoutDelay(t, unknown.grpc), protocmp.Transform()); diff != "" {
		t.Errorf("gRPC status, known (-) and unknown (+) username:\n%s", diff)
	}
	md := func(m metadata.MD) metadata.MD {
		m = m.Copy()
		for _, k := range []string{"x-request-id", retryafter.Key, "grpc-status-details-bin"} {
			delete(m, k)
		}
		return m
	}
	if diff := cmp.Diff(md(known.header), md(unknown.header)); diff != "" {
		t.Errorf("gRPC header metadata, known (-) and unknown (+) username:\n%s", diff)
	}
	if diff := cmp.Diff(md(known.trail), md(unknown.trail)); diff != "" {
		t.Errorf("gRPC trailer metadata, known (-) and unknown (+) username:\n%s", diff)
	}
	header := func(r restResponse) http.Header {
		h := r.Header.Clone()
		for _, k := range []string{"X-Request-Id", "Retry-After", "Date", "Content-Length"} {
			h.Del(k)
		}
		return h
	}
	if diff := cmp.Diff(header(known.rest), header(unknown.rest)); diff != "" {
		t.Errorf("REST headers, known (-) and unknown (+) username:\n%s", diff)
	}
	delay := regexp.MustCompile(`"retryDelay":"\d+s"`)
	kb, ub := delay.ReplaceAll(known.rest.Body, nil), delay.ReplaceAll(unknown.rest.Body, nil)
	if known.rest.Code != unknown.rest.Code || string(kb) != string(ub) {
		t.Errorf("REST answers: known %d %s, unknown %d %s; want the same", known.rest.Code, known.rest.Body, unknown.rest.Code, unknown.rest.Body)
	}
}

// withoutDelay returns st's proto with the delay of its RetryInfo cleared.
func withoutDelay(t *testing.T, st *status.Status) *spb.Status {
	t.Helper()
	p := proto.Clone(st.Proto()).(*spb.Status)
	for i, d := range p.GetDetails() {
		if d.MessageIs(&errdetails.RetryInfo{}) {
			a, err := anypb.New(&errdetails.RetryInfo{})
			if err != nil {
				t.Fatal(err)
			}
			p.Details[i] = a
		}
	}
	return p
}

// TestLoginThrottle fails logins for a username that exists and one that
// does not, throttleMax times each: then logins for both, even with the
// right password, answer 429 LOGIN_THROTTLED with Retry-After on REST and
// gRPC, the same answer for both; another username is not affected; and
// once the window has passed, logins work again. A window long enough to
// be sure that the throttled logins came within it depends on how fast the
// machine hashes: the test starts with 2 s and takes a longer one when the
// machine was too slow to tell.
func TestLoginThrottle(t *testing.T) {
	t.Parallel()
	for _, window := range []time.Duration{2 * time.Second, 10 * time.Second, 40 * time.Second} {
		if throttleOnce(t, window) {
			return
		}
		t.Logf("window %v: the logins took longer than the window, trying a longer one", window)
	}
	t.Fatal("the failed logins took longer than a window of 40s")
}

// throttleOnce is one run of TestLoginThrottle with window; it returns
// false when the throttled logins were answered too late to know that
// their window had not passed yet.
func throttleOnce(t *testing.T, window time.Duration) bool {
	e := newTestEnv(t, withLoginThrottle(window))
	e.newAccount(t, "erin")
	// The window of each username starts after start, with its first
	// failure: an answer received before start + window came within it.
	start := time.Now()
	failLogins(t, e, throttleMax, "erin", "nobody")
	known := loginBoth(t, e, "erin", "password1")
	unknown := loginBoth(t, e, "nobody", "password1")
	if time.Since(start) >= window {
		return false
	}
	t.Logf("window %v: %d failures each and the throttled logins took %v", window, throttleMax, time.Since(start).Round(time.Millisecond))
	sameThrottled(t, known, unknown, window)
	if got := series(e.scrape(t), "sheba_login_throttled_total")[""]; got != 4 {
		t.Errorf("sheba_login_throttled_total %v after 4 throttled logins, want 4", got)
	}

	// Another username, known or not, is not affected.
	e.newAccount(t, "frank")
	if _, err := e.account.Login(t.Context(), &shebav1.LoginRequest{Username: "frank", Password: "password1"}); err != nil {
		t.Errorf("login of another username: %v", err)
	}
	r := e.do(t, http.MethodPost, "/v1/accounts:login", loginBody("someone", "password1"))
	wantRESTDetails(t, "another unknown username", r, http.StatusUnauthorized, reason.LoginFailed)

	// After the window, logins work again; until then they stay
	// throttled. Each username's window ended by the answer to its first
	// failure plus the window, which failLogins waited for.
	time.Sleep(time.Until(start.Add(window)))
	for _, test := range []struct {
		username string
		want     codes.Code
	}{{"erin", codes.OK}, {"nobody", codes.Unauthenticated}} {
		for deadline := time.Now().Add(window + 30*time.Second); ; time.Sleep(100 * time.Millisecond) {
			_, err := e.account.Login(t.Context(), &shebav1.LoginRequest{Username: test.username, Password: "password1"})
			st := status.Convert(err)
			if st.Code() == test.want {
				break
			}
			if reason.Of(st) != reason.LoginThrottled {
				t.Fatalf("login of %s after the window: got %v, want %v (or LOGIN_THROTTLED while it lasts)", test.username, err, test.want)
			}
			if time.Now().After(deadline) {
				t.Fatalf("login of %s still throttled %v after the window of %v", test.username, time.Since(start)-window, window)
			}
		}
		if took := time.Since(start); took < window {
			t.Errorf("login of %s allowed %v after its first failure, within the window of %v", test.username, took, window)
		}
	}
	return true
}

// TestLoginsAtOnceNotThrottled sends 4 × throttleMax logins with the right
// password for one username at once, on both transports: none fails, so
// none is throttled; they take turns instead.
func TestLoginsAtOnceNotThrottled(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, withLoginThrottle(time.Hour))
	e.newAccount(t, "judy")
	var wg sync.WaitGroup
	for i := range 4 * throttleMax {
		wg.Go(func() {
			if i%2 == 0 {
				if _, err := e.account.Login(t.Context(), &shebav1.LoginRequest{Username: "judy", Password: "password1"}); err != nil {
					t.Errorf("gRPC login %d: %v", i, err)
				}
				return
			}
			if r := e.do(t, http.MethodPost, "/v1/accounts:login", loginBody("judy", "password1")); r.Code != http.StatusOK {
				t.Errorf("REST login %d: got HTTP %d, want 200; body %s", i, r.Code, r.Body)
			}
		})
	}
	wg.Wait()
}

// TestLoginThrottleSharedThroughRedis runs two services (two replicas) on
// one real Redis: failures counted on either throttle the username on
// both. With Redis stopped, logins still answer, and each replica throttles
// alone.
func TestLoginThrottleSharedThroughRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	envs := onRedis(t, srv, 2, withLoginThrottle(time.Hour), patientRedis)
	a, b := envs[0], envs[1]
	a.newAccount(t, "grace")

	// Two failures on one replica and one on the other.
	failLogins(t, a, 2, "grace", "nobody")
	failLogins(t, b, 1, "grace", "nobody")
	for i, e := range envs {
		for _, u := range []string{"grace", "nobody"} {
			wantThrottled(t, fmt.Sprintf("replica %d, %s", i, u), loginBoth(t, e, u, "password1"), time.Hour)
		}
	}
	for i, e := range envs {
		if up := backendUp(t, e); up != 1 {
			t.Errorf("replica %d: sheba_ratelimit_backend_up %v with Redis up, want 1", i, up)
		}
	}

	srv.Stop()
	// Logins still answer: a known user logs in on a, where it exists.
	a.newAccount(t, "heidi")
	if _, err := a.account.Login(t.Context(), &shebav1.LoginRequest{Username: "heidi", Password: "password1"}); err != nil {
		t.Errorf("login with Redis stopped: %v", err)
	}
	// Each replica counts alone: throttleMax failures on a throttle the
	// username on a only.
	failLogins(t, a, throttleMax, "ivan")
	wantThrottled(t, "Redis stopped, the replica that counted", loginBoth(t, a, "ivan", "password1"), time.Hour)
	_, err := b.account.Login(t.Context(), &shebav1.LoginRequest{Username: "ivan", Password: "password1"})
	wantGRPCDetails(t, "Redis stopped, the other replica", err, nil, codes.Unauthenticated, reason.LoginFailed)
	for i, e := range envs {
		if up := backendUp(t, e); up != 0 {
			t.Errorf("replica %d: sheba_ratelimit_backend_up %v with Redis stopped, want 0", i, up)
		}
		if n := strings.Count(e.logs.String(), "redis is down or slow"); n != 1 {
			t.Errorf("replica %d logged the fallback %d times, want once", i, n)
		}
	}
}
