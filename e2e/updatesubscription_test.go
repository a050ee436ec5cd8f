package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/shebasvc/sheba/e2e/resttest"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/webhooks/webhookstest"
)

// The end-to-end tests of UpdateSubscription (docs/api.md#updatesubscription):
// the plan changed on every transport, update masks (AIP-134), etags and
// If-Match (AIP-154), replays, and the subscription.updated event.

// activePlan returns the plan of the account's active subscription, "" when
// it has none.
func (e *testEnv) activePlan(t *testing.T, accountID string) string {
	t.Helper()
	var plan string
	err := e.pool.QueryRow(t.Context(), `SELECT coalesce(max(plan), '') FROM subscriptions WHERE status = 'active' AND account_id = $1`, accountID).Scan(&plan)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// jsonOf is v as JSON text.
func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestUpdateSubscriptionGRPC changes the plan over gRPC: each mask that
// names the plan (none, "plan", "*"), the same plan again (no new etag),
// a mask or a plan that is not allowed (400, nothing changed), another
// etag as the field or the if-match metadata (ABORTED), no active
// subscription (NOT_FOUND).
func TestUpdateSubscriptionGRPC(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := t.Context()
	id := e.insertAccount(t, "uma")
	created, err := e.sub.CreateSubscription(ctx, &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"})
	if err != nil {
		t.Fatalf("CreateSubscription: %v", err)
	}
	tag := created.GetSubscription().GetEtag()
	update := func(ctx context.Context, plan, etag string, mask ...string) (*shebav1.Subscription, error) {
		req := &shebav1.UpdateSubscriptionRequest{AccountId: id, Subscription: &shebav1.Subscription{Plan: plan, Etag: etag}}
		if mask != nil {
			req.UpdateMask = &fieldmaskpb.FieldMask{Paths: mask}
		}
		resp, err := e.sub.UpdateSubscription(ctx, req)
		return resp.GetSubscription(), err
	}

	for _, test := range []struct {
		name, plan string
		mask       []string
	}{
		{"no mask", "team", nil},
		{"plan", "solo", []string{"plan"}},
		{"*", "max", []string{"*"}},
	} {
		got, err := update(ctx, test.plan, "", test.mask...)
		if err != nil {
			t.Fatalf("%s: %v", test.name, err)
		}
		if got.GetPlan() != test.plan || got.GetEtag() == tag || !etagPattern.MatchString(got.GetEtag()) ||
			got.GetId() != created.GetSubscription().GetId() || got.GetStatus() != shebav1.SubscriptionStatus_SUBSCRIPTION_STATUS_ACTIVE {
			t.Errorf("%s: got %v, want the subscription on plan %q with a new etag", test.name, got, test.plan)
		}
		tag = got.GetEtag()
	}
	same, err := update(ctx, "max", tag)
	if err != nil || same.GetEtag() != tag {
		t.Errorf("the same plan again: got %v, %v; want the subscription unchanged, etag %q", same, err, tag)
	}

	for _, test := range []struct {
		name, plan, field string
		mask              []string
	}{
		{"a mask of another field", "team", "update_mask", []string{"id"}},
		{"a mask of the etag", "team", "update_mask", []string{"plan", "etag"}},
		{"a mask of a field of the plan", "team", "update_mask", []string{"plan.name"}},
		{"an empty plan", "", "subscription.plan", nil},
		{"a bad plan", "Team!", "subscription.plan", []string{"plan"}},
	} {
		_, err := update(ctx, test.plan, "", test.mask...)
		wantGRPCError(t, err, codes.InvalidArgument, test.field)
	}
	_, err = e.sub.UpdateSubscription(ctx, &shebav1.UpdateSubscriptionRequest{AccountId: id})
	wantGRPCError(t, err, codes.InvalidArgument, "subscription")

	_, err = update(ctx, "team", staleETag)
	wantETagMismatchGRPC(t, "etag field", err)
	_, err = update(metadata.AppendToOutgoingContext(ctx, "if-match", `"`+staleETag+`"`), "team", "")
	wantETagMismatchGRPC(t, "if-match", err)
	if plan := e.activePlan(t, id); plan != "max" {
		t.Fatalf("after the refused updates: plan %q, want max", plan)
	}
	got, err := update(metadata.AppendToOutgoingContext(ctx, "if-match", `"`+tag+`"`), "team", tag)
	if err != nil || got.GetPlan() != "team" {
		t.Fatalf("under the current etag: got %v, %v; want plan team", got, err)
	}

	other := e.insertAccount(t, "vic")
	_, err = e.sub.UpdateSubscription(ctx, &shebav1.UpdateSubscriptionRequest{AccountId: other, Subscription: &shebav1.Subscription{Plan: "team", Etag: staleETag}})
	wantGRPCError(t, err, codes.NotFound, "")
}

// TestUpdateSubscriptionREST changes the plan with PATCH: a JSON body with
// the plan, the subscription as it was read (etag and output-only fields
// ignored but the etag checked), an updateMask, CBOR, If-Match (412 when
// it does not match, 404 before it), and what cannot change (400).
func TestUpdateSubscriptionREST(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	id := e.insertAccount(t, "wes")
	path := subscribePath(id)
	created := e.do(t, http.MethodPost, path, `{"plan":"pro"}`)
	wantCode(t, created, http.StatusOK)

	r := e.do(t, http.MethodPatch, path, `{"plan":"team"}`)
	wantCode(t, r, http.StatusOK)
	read := wantETagHeaderOf(t, "PATCH plan", r)
	if read["plan"] != "team" || read["id"] != created.JSON(t)["id"] || read["etag"] == created.JSON(t)["etag"] {
		t.Errorf("PATCH plan: got %s, want the subscription on plan team with a new etag", r.Body)
	}

	// What GET answered, sent back with another plan: the output-only
	// fields are ignored, the etag is the condition.
	got := e.do(t, http.MethodGet, path, "")
	wantCode(t, got, http.StatusOK)
	body := got.JSON(t)
	body["plan"] = "solo"
	body["status"] = "SUBSCRIPTION_STATUS_CANCELED"
	body["id"] = "00000000-0000-0000-0000-000000000000"
	r = e.do(t, http.MethodPatch, path, jsonOf(t, body))
	wantCode(t, r, http.StatusOK)
	solo := wantETagHeaderOf(t, "PATCH back what GET read", r)
	if solo["plan"] != "solo" || solo["status"] != "SUBSCRIPTION_STATUS_ACTIVE" || solo["id"] != read["id"] {
		t.Errorf("PATCH back what GET read: got %s, want only the plan changed", r.Body)
	}
	r = e.do(t, http.MethodPatch, path, jsonOf(t, body))
	wantRESTError(t, r, http.StatusConflict, codes.Aborted, "")
	if reasonOf(status.FromProto(r.Status(t))) != "ETAG_MISMATCH" {
		t.Errorf("PATCH under an old etag: got %s, want ETAG_MISMATCH", r.Body)
	}

	r = e.do(t, http.MethodPatch, path+"?updateMask=plan", `{"plan":"duo","etag":"`+staleETag+`"}`)
	wantRESTError(t, r, http.StatusConflict, codes.Aborted, "")
	r = e.do(t, http.MethodPatch, path+"?updateMask=plan", `{"plan":"duo"}`)
	wantCode(t, r, http.StatusOK)
	for _, test := range []struct{ name, query, body, field string }{
		{"a mask of another field", "?updateMask=status", `{"plan":"trio"}`, "update_mask"},
		{"a mask of the etag", "?updateMask=plan,etag", `{"plan":"trio"}`, "update_mask"},
		{"an empty plan", "", `{"plan":""}`, "subscription.plan"},
		{"no plan", "", `{"etag":"` + staleETag + `"}`, "subscription.plan"},
		{"a bad plan", "", `{"plan":"Trio!"}`, "subscription.plan"},
	} {
		r := e.do(t, http.MethodPatch, path+test.query, test.body)
		wantRESTError(t, r, http.StatusBadRequest, codes.InvalidArgument, test.field)
	}
	r = e.do(t, http.MethodPatch, path, `{"plan":"trio","extra":1}`)
	wantRESTError(t, r, http.StatusBadRequest, codes.InvalidArgument, "")
	if plan := e.activePlan(t, id); plan != "duo" {
		t.Fatalf("after the refused updates: plan %q, want duo", plan)
	}

	// CBOR: the mask is inferred from the body as from JSON.
	doc, err := cbor.Marshal(map[string]any{"plan": "cbor-plan", "status": "SUBSCRIPTION_STATUS_CANCELED"})
	if err != nil {
		t.Fatal(err)
	}
	r = e.do(t, http.MethodPatch, path, string(doc), "Content-Type", "application/cbor", "Accept", "application/cbor")
	wantCode(t, r, http.StatusOK)
	var answer map[string]any
	if err := cbor.Unmarshal(r.Body, &answer); err != nil || answer["plan"] != "cbor-plan" || answer["status"] != "SUBSCRIPTION_STATUS_ACTIVE" {
		t.Errorf("CBOR PATCH: got %v (%v), want plan cbor-plan, still active", answer, err)
	}
	if r.Header.Get("ETag") != `"`+answer["etag"].(string)+`"` {
		t.Errorf("CBOR PATCH: ETag %q, want the body's etag %q", r.Header.Get("ETag"), answer["etag"])
	}

	// If-Match: 412 when it does not match, * for any active subscription.
	r = e.do(t, http.MethodPatch, path, `{"plan":"quad"}`, "If-Match", `"`+staleETag+`"`)
	wantRESTError(t, r, http.StatusPreconditionFailed, codes.Aborted, "")
	r = e.do(t, http.MethodPatch, path, `{"plan":"quad"}`, "If-Match", `W/"`+answer["etag"].(string)+`"`)
	wantRESTError(t, r, http.StatusPreconditionFailed, codes.Aborted, "")
	r = e.do(t, http.MethodPatch, path, `{"plan":"quad"}`, "If-Match", `"`+staleETag+`", "`+answer["etag"].(string)+`"`)
	wantCode(t, r, http.StatusOK)
	r = e.do(t, http.MethodPatch, path, `{"plan":"quint"}`, "If-Match", "*")
	wantCode(t, r, http.StatusOK)
	if plan := e.activePlan(t, id); plan != "quint" {
		t.Errorf("after If-Match *: plan %q, want quint", plan)
	}
	other := e.insertAccount(t, "xia")
	r = e.do(t, http.MethodPatch, subscribePath(other), `{"plan":"quad"}`, "If-Match", `"`+staleETag+`"`)
	wantRESTError(t, r, http.StatusNotFound, codes.NotFound, "")
}

// TestUpdateSubscriptionReplay checks that UpdateSubscription takes an
// Idempotency-Key: a retry gets the first answer again, ETag header
// included, even on gRPC, and another plan under the same key is 422.
func TestUpdateSubscriptionReplay(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	id := e.insertAccount(t, "yan")
	wantCode(t, e.do(t, http.MethodPost, subscribePath(id), `{"plan":"pro"}`), http.StatusOK)

	first := e.do(t, http.MethodPatch, subscribePath(id), `{"plan":"team"}`, "Idempotency-Key", "update-1")
	wantCode(t, first, http.StatusOK)
	wantETagHeaderOf(t, "update", first)
	// Changed since: only a replay can answer plan team now.
	wantCode(t, e.do(t, http.MethodPatch, subscribePath(id), `{"plan":"solo"}`), http.StatusOK)
	again := e.do(t, http.MethodPatch, subscribePath(id), `{"plan":"team"}`, "Idempotency-Key", "update-1")
	wantCode(t, again, http.StatusOK)
	wantReplayed(t, "update retry", again, true)
	if again.Header.Get("ETag") != first.Header.Get("ETag") || !bytes.Equal(again.Body, first.Body) {
		t.Errorf("update retry: ETag %q and body %s, want the first answer's %q and %s",
			again.Header.Get("ETag"), again.Body, first.Header.Get("ETag"), first.Body)
	}
	var header metadata.MD
	resp, err := e.sub.UpdateSubscription(withIdemKey(t.Context(), "update-1"),
		// The REST call's mask, inferred from its body: the same request.
		&shebav1.UpdateSubscriptionRequest{AccountId: id, Subscription: &shebav1.Subscription{Plan: "team"}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"plan"}}},
		grpc.Header(&header))
	if err != nil {
		t.Fatalf("gRPC retry: %v", err)
	}
	wantGRPCReplay(t, "gRPC retry of a REST update", header, first.Body, resp.GetSubscription())
	r := e.do(t, http.MethodPatch, subscribePath(id), `{"plan":"duo"}`, "Idempotency-Key", "update-1")
	st := wantRESTError(t, r, http.StatusUnprocessableEntity, codes.InvalidArgument, "")
	if got := reasonOf(status.FromProto(st)); got != "IDEMPOTENCY_KEY_REUSED" {
		t.Errorf("another plan under the key: reason %q, want IDEMPOTENCY_KEY_REUSED", got)
	}
	if plan := e.activePlan(t, id); plan != "solo" {
		t.Errorf("after the replays: plan %q, want solo", plan)
	}
}

// TestUpdateSubscriptionConnect changes the plan over Connect (JSON), and
// answers another etag aborted (409), ETAG_MISMATCH.
func TestUpdateSubscriptionConnect(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	id := e.insertAccount(t, "zed")
	wantCode(t, e.do(t, http.MethodPost, subscribePath(id), `{"plan":"pro"}`), http.StatusOK)
	const method = "/sheba.v1.SubscriptionService/UpdateSubscription"
	r := e.do(t, http.MethodPost, method, `{"accountId":"`+id+`","subscription":{"plan":"team"},"updateMask":"plan"}`, "Connect-Protocol-Version", "1")
	wantCode(t, r, http.StatusOK)
	if sub, _ := r.JSON(t)["subscription"].(map[string]any); sub["plan"] != "team" || !etagPattern.MatchString(sub["etag"].(string)) {
		t.Errorf("Connect update: got %s, want plan team with an etag", r.Body)
	}
	r = e.do(t, http.MethodPost, method, `{"accountId":"`+id+`","subscription":{"plan":"solo","etag":"`+staleETag+`"}}`, "Connect-Protocol-Version", "1")
	wantCode(t, r, http.StatusConflict)
	if st := resttest.ConnectStatus(t, r.Body); st.Code() != codes.Aborted || reasonOf(st) != "ETAG_MISMATCH" {
		t.Errorf("Connect update under another etag: got %v, want aborted ETAG_MISMATCH", st)
	}
	if plan := e.activePlan(t, id); plan != "team" {
		t.Errorf("plan %q, want team", plan)
	}
}

// TestUpdateSubscriptionWebhook checks the subscription.updated event: it
// carries the subscription as the REST answer does, and setting the plan
// it has already emits nothing.
func TestUpdateSubscriptionWebhook(t *testing.T) {
	t.Parallel()
	e := newWebhookEnv(t, nil)
	rcv := webhookstest.NewReceiver(t, webhookstest.Status(http.StatusNoContent))
	endpointID, secret := e.createEndpoint(t, rcv.URL, "subscription.updated")
	id := e.insertAccount(t, "abe")
	wantCode(t, e.do(t, http.MethodPost, subscribePath(id), `{"plan":"pro"}`), http.StatusOK)
	updated := e.do(t, http.MethodPatch, subscribePath(id), `{"plan":"team"}`)
	wantCode(t, updated, http.StatusOK)
	same := e.do(t, http.MethodPatch, subscribePath(id), `{"plan":"team"}`)
	wantCode(t, same, http.StatusOK)
	if same.Header.Get("ETag") != updated.Header.Get("ETag") {
		t.Errorf("the same plan again: ETag %q, want %q (unchanged)", same.Header.Get("ETag"), updated.Header.Get("ETag"))
	}

	waitFor(t, 30*time.Second, "one delivery", func() bool { return e.allSucceeded(t, endpointID, 1) })
	var got []map[string]any
	for _, req := range rcv.Requests() {
		ev, err := req.Verify(secret)
		if err != nil {
			t.Fatalf("verify: %v", err)
		}
		if ev.Type != "subscription.updated" {
			t.Errorf("event type %q, want subscription.updated", ev.Type)
		}
		got = append(got, ev.Data)
	}
	if diff := cmp.Diff([]map[string]any{updated.JSON(t)}, got); diff != "" {
		t.Errorf("event data (-REST answer +got):\n%s", diff)
	}
	if n := e.count(t, `SELECT count(*) FROM webhook_events WHERE type = 'subscription.updated'`); n != 1 {
		t.Errorf("got %d subscription.updated events, want 1: the same plan again emits none", n)
	}
}
