package e2e

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/store/storetest/pgcluster"
)

// Reads from standbys (docs/operations.md#reading-from-standbys): sheba on
// a real primary with database.read_url on its real streaming standby.
// Where each read ran is read from sheba_db_reads_total.

// The reader: a key of its own, so that the test key's writes do not send
// its reads to the primary.
const (
	readerKey   = "reader-key-0123456789abcdefghijklmnop"
	readerKeyID = "reader"
)

// newStandbyEnv starts a cluster and sheba on its multi-host URL, reading
// from its standby within maxLag.
func newStandbyEnv(t *testing.T, maxLag time.Duration) (*pgcluster.Cluster, *testEnv) {
	t.Helper()
	c := pgcluster.Start(t)
	e := startTestEnv(t, envSetup{
		database: c.URL(),
		mutate: []func(*config.Config){func(cfg *config.Config) {
			cfg.Database.ReadURL = c.Standby.URL()
			cfg.Database.ReadMaxLag = maxLag
			cfg.Auth.Keys = append(cfg.Auth.Keys, keyEntry(readerKeyID, readerKey))
		}},
	})
	return c, e
}

// route names a series of sheba_db_reads_total.
func route(target, reason string) string {
	return "target=" + target + ",reason=" + reason
}

// routeOf makes the one read-only call that call makes and returns where
// it ran and why, from sheba_db_reads_total before and after it.
func (e *testEnv) routeOf(t *testing.T, call func()) string {
	t.Helper()
	before := series(e.scrape(t), "sheba_db_reads_total", "target", "reason")
	call()
	var moved []string
	for k, v := range series(e.scrape(t), "sheba_db_reads_total", "target", "reason") {
		if v != before[k] {
			moved = append(moved, fmt.Sprintf("%s +%v", k, v-before[k]))
		}
	}
	if len(moved) != 1 || !strings.HasSuffix(moved[0], " +1") {
		t.Fatalf("sheba_db_reads_total moved by %v, want one series by 1", moved)
	}
	return strings.TrimSuffix(moved[0], " +1")
}

// waitRoute makes call until it runs where want says, for 30 s at most.
func (e *testEnv) waitRoute(t *testing.T, what, want string, call func()) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := e.routeOf(t, call)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: read %s, not %s within 30 s", what, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// getSubscription reads the active subscription of account over transport
// (grpc, rest, or a browser protocol) with key, and returns its id and
// etag, or the HTTP status of the error.
func (e *testEnv) getSubscription(t *testing.T, transport, key, account string) (id, etag string, code int) {
	t.Helper()
	switch transport {
	case "grpc":
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", key)
		resp, err := e.sub.GetSubscription(ctx, &shebav1.GetSubscriptionRequest{AccountId: account})
		if err != nil {
			return "", "", runtime.HTTPStatusFromCode(status.Code(err))
		}
		return resp.GetSubscription().GetId(), resp.GetSubscription().GetEtag(), http.StatusOK
	case "rest":
		r := e.do(t, http.MethodGet, subscribePath(account), "", "X-Api-Key", key)
		if r.Code != http.StatusOK {
			return "", "", r.Code
		}
		body := r.JSON(t)
		id, _ = body["id"].(string)
		etag, _ = body["etag"].(string)
		return id, etag, http.StatusOK
	}
	a := browserCall[shebav1.GetSubscriptionRequest, shebav1.GetSubscriptionResponse](t, e, transport,
		shebav1.SubscriptionService_GetSubscription_FullMethodName, &shebav1.GetSubscriptionRequest{AccountId: account}, key)
	if a.st != nil {
		return "", "", runtime.HTTPStatusFromCode(a.st.Code())
	}
	return a.resp.GetSubscription().GetId(), a.resp.GetSubscription().GetEtag(), http.StatusOK
}

// getAccount reads account over transport (grpc or rest) as the reader,
// and fails the test unless it is found.
func (e *testEnv) getAccount(t *testing.T, transport, account string) {
	t.Helper()
	if transport == "grpc" {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", readerKey)
		if _, err := e.account.GetAccount(ctx, &shebav1.GetAccountRequest{AccountId: account}); err != nil {
			t.Fatalf("gRPC GetAccount: %v", err)
		}
		return
	}
	wantCode(t, e.do(t, http.MethodGet, "/v1/accounts/"+account, "", "X-Api-Key", readerKey), http.StatusOK)
}

// TestStandbyNotFoundFallback creates a subscription while the standby
// does not replay: another caller finds it all the same, on every
// transport, by asking the primary after the standby's NotFound; what the
// standby has, it answers.
func TestStandbyNotFoundFallback(t *testing.T) {
	t.Parallel()
	c, e := newStandbyEnv(t, time.Hour)
	account := e.newAccount(t, "nadia")
	c.WaitReplayed(t)
	c.Standby.PauseReplay(t)
	created, err := e.sub.CreateSubscription(t.Context(), &shebav1.CreateSubscriptionRequest{AccountId: account, Plan: "pro"})
	if err != nil {
		t.Fatal(err)
	}

	for _, transport := range []string{"grpc", "rest", "connect-json"} {
		var id string
		var code int
		got := e.routeOf(t, func() { id, _, code = e.getSubscription(t, transport, readerKey, account) })
		if code != http.StatusOK || id != created.GetSubscription().GetId() {
			t.Errorf("%s: got %q (HTTP %d), want the subscription just created", transport, id, code)
		}
		if want := route("primary", "not_found_fallback"); got != want {
			t.Errorf("%s: read %s, want %s", transport, got, want)
		}
	}
	var code int
	got := e.routeOf(t, func() { _, _, code = e.getSubscription(t, "rest", readerKey, unknownID) })
	if code != http.StatusNotFound || got != route("primary", "not_found_fallback") {
		t.Errorf("no such subscription: HTTP %d, read %s; want 404 after asking the primary", code, got)
	}
	for _, transport := range []string{"grpc", "rest"} {
		if got := e.routeOf(t, func() { e.getAccount(t, transport, account) }); got != route("standby", "ok") {
			t.Errorf("%s: an account the standby has: read %s, want %s", transport, got, route("standby", "ok"))
		}
	}
}

// TestStandbyRecentWrite changes a subscription while the standby does
// not replay: its writer reads it back changed, on gRPC and REST, and a
// change under the etag it read is not refused; another caller reads the
// standby's older version (within read_max_lag, as documented).
func TestStandbyRecentWrite(t *testing.T) {
	t.Parallel()
	c, e := newStandbyEnv(t, time.Hour)
	account := e.insertAccount(t, "rosa")
	path := subscribePath(account)
	created := e.do(t, http.MethodPost, path, `{"plan":"pro"}`)
	wantCode(t, created, http.StatusOK)
	c.WaitReplayed(t)
	c.Standby.PauseReplay(t)
	updated := e.do(t, http.MethodPatch, path, `{"plan":"team"}`)
	wantCode(t, updated, http.StatusOK)
	newETag := updated.JSON(t)["etag"].(string)

	var read string // the etag the writer read, last over REST
	for _, transport := range []string{"grpc", "rest"} {
		got := e.routeOf(t, func() { _, read, _ = e.getSubscription(t, transport, testKey, account) })
		if read != newETag || got != route("primary", "recent_write") {
			t.Errorf("%s: the writer read etag %q from %s, want %q from %s", transport, read, got, newETag, route("primary", "recent_write"))
		}
	}
	var etag string
	got := e.routeOf(t, func() { _, etag, _ = e.getSubscription(t, "rest", readerKey, account) })
	if etag != created.JSON(t)["etag"] || got != route("standby", "ok") {
		t.Errorf("another caller read etag %q from %s, want the standby's %q", etag, got, created.JSON(t)["etag"])
	}
	// A change under what it read is not refused (412).
	wantCode(t, e.do(t, http.MethodPost, path+":cancel", "", "If-Match", `"`+read+`"`), http.StatusOK)
}

// TestStandbyLag pauses the standby's replay behind a write: reads go to
// the primary once its lag passes database.read_max_lag, and back to the
// standby when it has replayed.
func TestStandbyLag(t *testing.T) {
	t.Parallel()
	const maxLag = 200 * time.Millisecond
	c, e := newStandbyEnv(t, maxLag)
	account := e.insertAccount(t, "lena")
	c.WaitReplayed(t)
	for _, transport := range []string{"grpc", "rest"} {
		e.waitRoute(t, transport+" read, caught up", route("standby", "ok"), func() { e.getAccount(t, transport, account) })
	}

	c.Standby.PauseReplay(t)
	e.insertAccount(t, "after-pause")
	for _, transport := range []string{"grpc", "rest"} {
		e.waitRoute(t, transport+" read, replay paused", route("primary", "lag"), func() { e.getAccount(t, transport, account) })
	}
	if lag := series(e.scrape(t), "sheba_db_standby_lag_seconds")[""]; lag <= maxLag.Seconds() {
		t.Errorf("sheba_db_standby_lag_seconds: got %v, want over %v", lag, maxLag.Seconds())
	}

	c.Standby.ResumeReplay(t)
	for _, transport := range []string{"grpc", "rest"} {
		e.waitRoute(t, transport+" read, replay resumed", route("standby", "ok"), func() { e.getAccount(t, transport, account) })
	}
	if lag := series(e.scrape(t), "sheba_db_standby_lag_seconds")[""]; lag > maxLag.Seconds() {
		t.Errorf("sheba_db_standby_lag_seconds: got %v, want at most %v", lag, maxLag.Seconds())
	}
}

// TestStandbyDown stops the standby: lookups still answer, from the
// primary, and the service stays ready; it reads the standby again once
// the standby is back. The standby's pool has its series.
func TestStandbyDown(t *testing.T) {
	t.Parallel()
	c, e := newStandbyEnv(t, time.Hour)
	account := e.insertAccount(t, "olga")
	c.WaitReplayed(t)
	e.waitRoute(t, "read, standby up", route("standby", "ok"), func() { e.getAccount(t, "grpc", account) })
	pools := series(e.scrape(t), "sheba_db_pool_max_conns", "pool")
	if want := []string{"pool=primary", "pool=river", "pool=standby"}; !slices.Equal(slices.Sorted(maps.Keys(pools)), want) || pools["pool=standby"] != 16 {
		t.Errorf("sheba_db_pool_max_conns: got %v, want the pools %v, the standby's at read_max_conns (16)", pools, want)
	}

	c.Standby.Stop(t, pgcluster.Fast)
	for _, transport := range []string{"grpc", "rest", "grpc", "rest"} {
		if got := e.routeOf(t, func() { e.getAccount(t, transport, account) }); got != route("primary", "standby_down") {
			t.Errorf("%s read, standby stopped: %s, want %s", transport, got, route("primary", "standby_down"))
		}
	}
	if rd := e.readiness(t); !rd.ready() {
		t.Errorf("standby stopped: readiness %+v, want ready", rd)
	}

	c.Standby.Start(t)
	e.waitRoute(t, "read, standby back", route("standby", "ok"), func() { e.getAccount(t, "rest", account) })
}

// TestStandbyPrimaryDown stops the primary: the replica turns not ready,
// yet the standby still answers the reads it can, within read_max_lag;
// a read it cannot answer is 503 at once, not 404.
func TestStandbyPrimaryDown(t *testing.T) {
	t.Parallel()
	c, e := newStandbyEnv(t, time.Hour)
	account := e.insertAccount(t, "ines")
	c.WaitReplayed(t)
	c.Primary.Stop(t, pgcluster.Fast)
	waitFor(t, 10*time.Second, "not ready once the primary stopped", func() bool { return e.readiness(t).notReady() })

	for _, transport := range []string{"grpc", "rest"} {
		if got := e.routeOf(t, func() { e.getAccount(t, transport, account) }); got != route("standby", "ok") {
			t.Errorf("%s: read %s, want %s", transport, got, route("standby", "ok"))
		}
		var code int
		got := e.routeOf(t, func() { _, _, code = e.getSubscription(t, transport, readerKey, account) })
		if code != http.StatusServiceUnavailable || got != route("primary", "not_found_fallback") {
			t.Errorf("%s: a subscription the standby does not have: HTTP %d from %s, want 503 for the primary", transport, code, got)
		}
	}
}
