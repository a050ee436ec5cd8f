package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/ratelimit/redislimit/redistest"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// The login throttle per caller (docs/api.md#login): failures count per
// username and API key, so one key's failures never lock the username out
// for another key; a ceiling over every key (limits.login_failures.max_all)
// still throttles the username for all of them.

// The keys of these tests besides testKey ("test").
var otherKeys = []struct{ id, key string }{
	{"shop", "shop-key-0123456789abcdefghijklmnopqrstu"},
	{"mobile", "mobile-key-0123456789abcdefghijklmnopqrs"},
	{"batch", "batch-key-0123456789abcdefghijklmnopqrst"},
}

// withOtherKeys configures otherKeys beside testKey.
func withOtherKeys(c *config.Config) {
	for _, k := range otherKeys {
		c.Auth.Keys = append(c.Auth.Keys, keyEntry(k.id, k.key))
	}
}

// wantLoggedIn checks that both logins of a succeeded.
func wantLoggedIn(t *testing.T, what string, a throttledAnswer) {
	t.Helper()
	if a.grpc.Code() != codes.OK {
		t.Errorf("%s, gRPC: got %v %q (%s), want OK", what, a.grpc.Code(), a.grpc.Message(), reason.Of(a.grpc))
	}
	if a.rest.Code != http.StatusOK {
		t.Errorf("%s, REST: got HTTP %d %s, want 200", what, a.rest.Code, a.rest.Body)
	}
}

// TestLoginThrottlePerKey is the audit's shape, with the default limits
// (10 failures of one key, 100 of all keys, 15 minutes): 10 wrong logins
// for a username through one key, then the right password through
// another key logs in, on gRPC and REST, while the first key stays
// throttled, with the same answer for a username that exists and one that
// does not (it used to answer the second key 429 LOGIN_THROTTLED for the
// whole window).
func TestLoginThrottlePerKey(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, withOtherKeys, patientLogins)
	defaults := config.Default().Limits.LoginFailures
	e.newAccount(t, "olivia")
	failLogins(t, e, defaults.Max, "olivia", "nobody")

	b := loginBothAs(t, e, otherKeys[0].key, "olivia", "password1")
	t.Logf("key %s's login after %d failures through key %s: gRPC %v, REST HTTP %d", otherKeys[0].id, defaults.Max, testKeyID, b.grpc.Code(), b.rest.Code)
	wantLoggedIn(t, "another key's login", b)
	r := e.do(t, http.MethodPost, "/v1/accounts:login", loginBody("nobody", "password1"), "X-Api-Key", otherKeys[0].key)
	wantRESTDetails(t, "another key's login of an unknown username", r, http.StatusUnauthorized, reason.LoginFailed)

	// The first key stays throttled, alike for both usernames, and the
	// other key's success did not let it in.
	sameThrottled(t, loginBoth(t, e, "olivia", "password1"), loginBoth(t, e, "nobody", "password1"), defaults.Window)

	// The browser protocols alike: the other key logs in, the first is
	// throttled.
	login := &shebav1.LoginRequest{Username: "olivia", Password: "password1"}
	for _, p := range browserProtocols {
		if a := browserCall[shebav1.LoginRequest, shebav1.LoginResponse](t, e, p, shebav1.AccountService_Login_FullMethodName, login, otherKeys[0].key); a.st != nil {
			t.Errorf("%s, another key's login: got %v %q (%s), want OK", p, a.st.Code(), a.st.Message(), reason.Of(a.st))
		}
		a := browserCall[shebav1.LoginRequest, shebav1.LoginResponse](t, e, p, shebav1.AccountService_Login_FullMethodName, login, testKey)
		wantBrowserError(t, a, codes.ResourceExhausted, reason.LoginThrottled, "")
	}
}

// TestLoginThrottleCeiling spreads max_all failures over three keys, none
// of them reaching max: then the username is throttled for every key, a
// fourth that never failed included, and only that username.
func TestLoginThrottleCeiling(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, withOtherKeys, patientLogins, func(c *config.Config) {
		c.Limits.LoginFailures = config.LoginFailures{Max: 3, MaxAll: 6, Window: time.Hour}
	})
	e.newAccount(t, "peggy")
	e.newAccount(t, "quinn")
	for _, key := range []string{testKey, otherKeys[0].key, otherKeys[1].key} {
		failLoginsAs(t, e, key, 2, "peggy")
	}
	for _, key := range []string{testKey, otherKeys[2].key} {
		wantThrottled(t, "after 6 failures over 3 keys", loginBothAs(t, e, key, "peggy", "password1"), time.Hour)
	}
	wantLoggedIn(t, "another username", loginBothAs(t, e, otherKeys[2].key, "quinn", "password1"))
}

// TestLoginThrottlePerKeySharedThroughRedis runs two replicas on one real
// Redis: one key's failures, spread over both, throttle that key on both
// and not another; failures of several keys over both reach the ceiling
// for every key on both.
func TestLoginThrottlePerKeySharedThroughRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	envs := onRedis(t, srv, 2, withOtherKeys, patientLogins, func(c *config.Config) {
		c.Limits.LoginFailures = config.LoginFailures{Max: 3, MaxAll: 6, Window: time.Hour}
	}, patientRedis)
	a, b := envs[0], envs[1]
	a.newAccount(t, "rose")
	failLogins(t, a, 2, "rose")
	failLogins(t, b, 1, "rose")
	for i, e := range envs {
		wantThrottled(t, fmt.Sprintf("replica %d, the key that failed", i), loginBoth(t, e, "rose", "password1"), time.Hour)
	}
	// rose exists on a alone (each replica has a database of its own).
	wantLoggedIn(t, "replica 0, another key", loginBothAs(t, a, otherKeys[0].key, "rose", "password1"))

	// 3 failures so far; 3 more of two other keys over both replicas.
	failLoginsAs(t, a, otherKeys[1].key, 2, "rose")
	failLoginsAs(t, b, otherKeys[2].key, 1, "rose")
	for i, e := range envs {
		wantThrottled(t, fmt.Sprintf("replica %d, a key that never failed, after 6 failures of all keys", i),
			loginBothAs(t, e, otherKeys[0].key, "rose", "password1"), time.Hour)
	}
	for i, e := range envs {
		if up := backendUp(t, e); up != 1 {
			t.Errorf("replica %d: sheba_ratelimit_backend_up %v with Redis up, want 1", i, up)
		}
	}
}
