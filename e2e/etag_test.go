package e2e

import (
	"bytes"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/e2e/resttest"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/webhooks/webhookstest"
)

// The end-to-end tests of etags (docs/api.md#etags): gRPC and Connect,
// replays through the whole chain, webhooks. The REST rules (the ETag
// header, If-Match, JSON and CBOR) are tested in server/gateway.

// etagPattern is the shape of an etag: 16 characters of base64url.
var etagPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{16}$`)

// staleETag is an etag no subscription has.
const staleETag = "AAAAAAAAAAAAAAAA"

// wantETagMismatchGRPC checks a gRPC ABORTED ETAG_MISMATCH.
func wantETagMismatchGRPC(t *testing.T, what string, err error) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.Aborted || reasonOf(st) != "ETAG_MISMATCH" {
		t.Errorf("%s: got %v (reason %q), want ABORTED ETAG_MISMATCH", what, err, reasonOf(st))
	}
}

// activeVersion returns the version of the account's active subscription,
// 0 when it has none.
func (e *testEnv) activeVersion(t *testing.T, accountID string) int {
	t.Helper()
	return e.count(t, `SELECT coalesce(max(version), 0) FROM subscriptions WHERE status = 'active' AND account_id = $1`, accountID)
}

// wantETagHeaderOf checks that r carries the etag of its JSON body, quoted,
// as its ETag header, and returns the body.
func wantETagHeaderOf(t *testing.T, what string, r restResponse) map[string]any {
	t.Helper()
	body := r.JSON(t)
	e, _ := body["etag"].(string)
	if !etagPattern.MatchString(e) {
		t.Errorf("%s: etag %q, want 16 characters of base64url", what, e)
	}
	if got := r.Header.Values("ETag"); len(got) != 1 || got[0] != `"`+e+`"` {
		t.Errorf("%s: ETag header %q, want [%q]", what, got, `"`+e+`"`)
	}
	return body
}

// TestETagGRPC checks etags over gRPC: Create, Get and List give the same
// etag until a cancel changes it; Cancel under another etag (the field or
// the if-match metadata) is ABORTED ETAG_MISMATCH and changes nothing;
// under the current one it cancels.
func TestETagGRPC(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := t.Context()
	id := e.insertAccount(t, "ivy")
	created, err := e.sub.CreateSubscription(ctx, &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"})
	if err != nil {
		t.Fatalf("CreateSubscription: %v", err)
	}
	tag := created.GetSubscription().GetEtag()
	if !etagPattern.MatchString(tag) {
		t.Fatalf("CreateSubscription: etag %q, want 16 characters of base64url", tag)
	}
	for range 2 {
		got, err := e.sub.GetSubscription(ctx, &shebav1.GetSubscriptionRequest{AccountId: id})
		if err != nil || got.GetSubscription().GetEtag() != tag {
			t.Fatalf("GetSubscription: got %v, %v; want etag %q", got, err, tag)
		}
	}

	_, err = e.sub.CancelSubscription(ctx, &shebav1.CancelSubscriptionRequest{AccountId: id, Etag: staleETag})
	wantETagMismatchGRPC(t, "etag field", err)
	for _, ifMatch := range []string{`"` + staleETag + `"`, tag, `W/"` + tag + `"`} {
		_, err = e.sub.CancelSubscription(metadata.AppendToOutgoingContext(ctx, "if-match", ifMatch), &shebav1.CancelSubscriptionRequest{AccountId: id})
		wantETagMismatchGRPC(t, "if-match "+ifMatch, err)
	}
	if v := e.activeVersion(t, id); v != 1 {
		t.Fatalf("after the mismatches: active version %d, want 1", v)
	}

	canceled, err := e.sub.CancelSubscription(metadata.AppendToOutgoingContext(ctx, "if-match", `"`+tag+`"`),
		&shebav1.CancelSubscriptionRequest{AccountId: id, Etag: tag})
	if err != nil {
		t.Fatalf("CancelSubscription under the current etag: %v", err)
	}
	c := canceled.GetSubscription()
	if c.GetStatus() != shebav1.SubscriptionStatus_SUBSCRIPTION_STATUS_CANCELED || !etagPattern.MatchString(c.GetEtag()) || c.GetEtag() == tag {
		t.Errorf("CancelSubscription: got %v, want it canceled with a new etag", c)
	}
	list, err := e.sub.ListSubscriptions(ctx, &shebav1.ListSubscriptionsRequest{})
	if err != nil || len(list.GetSubscriptions()) != 1 || list.GetSubscriptions()[0].GetEtag() != c.GetEtag() {
		t.Errorf("ListSubscriptions: got %v, %v; want the canceled subscription with etag %q", list, err, c.GetEtag())
	}
	_, err = e.sub.CancelSubscription(ctx, &shebav1.CancelSubscriptionRequest{AccountId: id, Etag: c.GetEtag()})
	wantGRPCError(t, err, codes.NotFound, "")
}

// TestETagReplay checks that a replayed answer repeats the ETag header of
// the first one, on REST, and that a keyed change's If-Match is part of its
// request: the same key under another If-Match is 422, and the same
// request over gRPC, its if-match metadata as the header, is replayed.
func TestETagReplay(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	id := e.insertAccount(t, "jay")

	first := e.do(t, http.MethodPost, subscribePath(id), `{"plan":"pro"}`, "Idempotency-Key", "create-1")
	wantCode(t, first, http.StatusOK)
	sub := wantETagHeaderOf(t, "create", first)
	again := e.do(t, http.MethodPost, subscribePath(id), `{"plan":"pro"}`, "Idempotency-Key", "create-1")
	wantCode(t, again, http.StatusOK)
	wantReplayed(t, "create retry", again, true)
	if again.Header.Get("ETag") != first.Header.Get("ETag") {
		t.Errorf("create retry: ETag %q, want the first answer's %q", again.Header.Get("ETag"), first.Header.Get("ETag"))
	}

	cancel := subscribePath(id) + ":cancel"
	ifMatch := first.Header.Get("ETag")
	if e, _ := sub["etag"].(string); ifMatch != `"`+e+`"` || e == "" {
		t.Fatalf("create: no ETag header of its etag %v", sub["etag"])
	}
	canceled := e.do(t, http.MethodPost, cancel, "", "Idempotency-Key", "cancel-1", "If-Match", ifMatch)
	wantCode(t, canceled, http.StatusOK)
	wantETagHeaderOf(t, "cancel", canceled)
	// The subscription changed since: only a replay can answer 200 now.
	again = e.do(t, http.MethodPost, cancel, "", "Idempotency-Key", "cancel-1", "If-Match", ifMatch)
	wantCode(t, again, http.StatusOK)
	wantReplayed(t, "cancel retry", again, true)
	if again.Header.Get("ETag") != canceled.Header.Get("ETag") || !bytes.Equal(again.Body, canceled.Body) {
		t.Errorf("cancel retry: ETag %q and body %s, want the first answer's %q and %s",
			again.Header.Get("ETag"), again.Body, canceled.Header.Get("ETag"), canceled.Body)
	}
	var header metadata.MD
	resp, err := e.sub.CancelSubscription(metadata.AppendToOutgoingContext(withIdemKey(t.Context(), "cancel-1"), "if-match", ifMatch),
		&shebav1.CancelSubscriptionRequest{AccountId: id}, grpc.Header(&header))
	if err != nil {
		t.Fatalf("gRPC retry: %v", err)
	}
	wantGRPCReplay(t, "gRPC retry of a REST cancel", header, canceled.Body, resp.GetSubscription())

	for _, other := range []string{"", `"` + staleETag + `"`, "*"} {
		r := e.do(t, http.MethodPost, cancel, "", "Idempotency-Key", "cancel-1", "If-Match", other)
		st := wantRESTError(t, r, http.StatusUnprocessableEntity, codes.InvalidArgument, "")
		if got := reasonOf(status.FromProto(st)); got != "IDEMPOTENCY_KEY_REUSED" {
			t.Errorf("retry under If-Match %q: reason %q, want IDEMPOTENCY_KEY_REUSED", other, got)
		}
	}
}

// TestETagConnect checks the etag over Connect: in the answer, and a
// cancel under another etag, as the field or If-Match, is Connect's
// aborted (409, not REST's 412), ETAG_MISMATCH.
func TestETagConnect(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	id := e.insertAccount(t, "kim")
	const method = "/sheba.v1.SubscriptionService/"
	r := e.do(t, http.MethodPost, method+"CreateSubscription", `{"accountId":"`+id+`","plan":"pro"}`, "Connect-Protocol-Version", "1")
	wantCode(t, r, http.StatusOK)
	sub, _ := r.JSON(t)["subscription"].(map[string]any)
	tag, _ := sub["etag"].(string)
	if !etagPattern.MatchString(tag) {
		t.Fatalf("CreateSubscription: got %s, want a subscription with an etag", r.Body)
	}
	for _, test := range []struct {
		name, body string
		header     []string
	}{
		{"field", `{"accountId":"` + id + `","etag":"` + staleETag + `"}`, nil},
		{"If-Match", `{"accountId":"` + id + `"}`, []string{"If-Match", `"` + staleETag + `"`}},
	} {
		r := e.do(t, http.MethodPost, method+"CancelSubscription", test.body, append([]string{"Connect-Protocol-Version", "1"}, test.header...)...)
		wantCode(t, r, http.StatusConflict)
		if st := resttest.ConnectStatus(t, r.Body); st.Code() != codes.Aborted || reasonOf(st) != "ETAG_MISMATCH" {
			t.Errorf("%s: got %v (reason %q), want aborted ETAG_MISMATCH", test.name, st, reasonOf(st))
		}
	}
	r = e.do(t, http.MethodPost, method+"CancelSubscription", `{"accountId":"`+id+`"}`, "Connect-Protocol-Version", "1", "If-Match", `"`+tag+`"`)
	wantCode(t, r, http.StatusOK)
	if c, _ := r.JSON(t)["subscription"].(map[string]any); c["status"] != "SUBSCRIPTION_STATUS_CANCELED" || c["etag"] == tag {
		t.Errorf("cancel under If-Match: got %s, want it canceled with a new etag", r.Body)
	}
}

// TestETagWebhook checks that a subscription's events carry it as the REST
// API answers it, its etag included, and that a cancel refused for its
// etag emits nothing.
func TestETagWebhook(t *testing.T) {
	t.Parallel()
	e := newWebhookEnv(t, nil)
	rcv := webhookstest.NewReceiver(t, webhookstest.Status(http.StatusNoContent))
	endpointID, secret := e.createEndpoint(t, rcv.URL, "subscription.created", "subscription.canceled")
	id := e.insertAccount(t, "lee")
	created := e.do(t, http.MethodPost, subscribePath(id), `{"plan":"pro"}`)
	wantCode(t, created, http.StatusOK)
	r := e.do(t, http.MethodPost, subscribePath(id)+":cancel", `{"etag":"`+staleETag+`"}`)
	wantRESTError(t, r, http.StatusConflict, codes.Aborted, "")
	canceled := e.do(t, http.MethodPost, subscribePath(id)+":cancel", "", "If-Match", created.Header.Get("ETag"))
	wantCode(t, canceled, http.StatusOK)

	waitFor(t, 30*time.Second, "two deliveries", func() bool { return e.allSucceeded(t, endpointID, 2) })
	want := map[string]map[string]any{"subscription.created": created.JSON(t), "subscription.canceled": canceled.JSON(t)}
	got := map[string]map[string]any{}
	for _, req := range rcv.Requests() {
		ev, err := req.Verify(secret)
		if err != nil {
			t.Fatalf("verify: %v", err)
		}
		got[ev.Type] = ev.Data
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("event data (-REST answers +got):\n%s", diff)
	}
	if n := e.count(t, `SELECT count(*) FROM webhook_events`); n != 2 {
		t.Errorf("got %d events, want 2: the refused cancel emits none", n)
	}
}
