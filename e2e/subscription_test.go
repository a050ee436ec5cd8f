package e2e

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

const unknownID = "00000000-0000-4000-8000-000000000000"

func (e *testEnv) newAccount(t *testing.T, username string) string {
	t.Helper()
	resp, err := e.account.CreateAccount(t.Context(), &shebav1.CreateAccountRequest{Username: username, Password: "password1"})
	if err != nil {
		t.Fatalf("CreateAccount(%s): %v", username, err)
	}
	return resp.GetAccount().GetId()
}

// insertAccount makes an account in SQL, without the API (and its password
// hashing), and returns its id.
func (e *testEnv) insertAccount(t *testing.T, username string) string {
	t.Helper()
	var id string
	if err := e.pool.QueryRow(t.Context(), `INSERT INTO accounts (username, password_hash) VALUES ($1, 'no-login') RETURNING id::text`, username).Scan(&id); err != nil {
		t.Fatalf("insert account %s: %v", username, err)
	}
	return id
}

func TestSubscriptionLifecycleGRPC(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	id := e.newAccount(t, "erin")
	ctx := t.Context()

	created, err := e.sub.CreateSubscription(ctx, &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro-2024"})
	if err != nil {
		t.Fatalf("CreateSubscription: %v", err)
	}
	s := created.GetSubscription()
	if s.GetAccountId() != id || s.GetPlan() != "pro-2024" || s.GetStatus() != shebav1.SubscriptionStatus_SUBSCRIPTION_STATUS_ACTIVE || s.GetCancelTime() != nil || len(s.GetId()) != 36 {
		t.Fatalf("CreateSubscription: got %v, want an active pro-2024 subscription of %s", s, id)
	}
	_, err = e.sub.CreateSubscription(ctx, &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "basic"})
	wantGRPCError(t, err, codes.AlreadyExists, "")

	got, err := e.sub.GetSubscription(ctx, &shebav1.GetSubscriptionRequest{AccountId: id})
	if err != nil {
		t.Fatalf("GetSubscription: %v", err)
	}
	if got.GetSubscription().GetId() != s.GetId() {
		t.Errorf("GetSubscription: got %v, want %v", got.GetSubscription(), s)
	}

	canceled, err := e.sub.CancelSubscription(ctx, &shebav1.CancelSubscriptionRequest{AccountId: id})
	if err != nil {
		t.Fatalf("CancelSubscription: %v", err)
	}
	c := canceled.GetSubscription()
	if c.GetId() != s.GetId() || c.GetStatus() != shebav1.SubscriptionStatus_SUBSCRIPTION_STATUS_CANCELED || c.GetCancelTime() == nil {
		t.Errorf("CancelSubscription: got %v, want %s canceled with a cancel_time", c, s.GetId())
	}
	_, err = e.sub.GetSubscription(ctx, &shebav1.GetSubscriptionRequest{AccountId: id})
	wantGRPCError(t, err, codes.NotFound, "")
	_, err = e.sub.CancelSubscription(ctx, &shebav1.CancelSubscriptionRequest{AccountId: id})
	wantGRPCError(t, err, codes.NotFound, "")

	// A new subscription may start once the old one is canceled.
	if _, err := e.sub.CreateSubscription(ctx, &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "basic"}); err != nil {
		t.Fatalf("CreateSubscription after cancel: %v", err)
	}
}

func TestSubscriptionLifecycleREST(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	id := e.newAccount(t, "frank")
	base := "/v1/accounts/" + id + "/subscription"

	r := e.do(t, http.MethodPost, base, `{"plan":"team"}`)
	wantCode(t, r, http.StatusOK)
	s := r.JSON(t)
	if s["accountId"] != id || s["plan"] != "team" || s["status"] != "SUBSCRIPTION_STATUS_ACTIVE" || s["createTime"] == nil {
		t.Fatalf("POST %s: got %s, want a bare active Subscription", base, r.Body)
	}
	if _, ok := s["cancelTime"]; ok {
		t.Errorf("POST %s: got cancelTime in %s, want it absent while active", base, r.Body)
	}
	wantRESTError(t, e.do(t, http.MethodPost, base, `{"plan":"team"}`), http.StatusConflict, codes.AlreadyExists, "")

	r = e.do(t, http.MethodGet, base, "")
	wantCode(t, r, http.StatusOK)
	if diff := cmp.Diff(s, r.JSON(t)); diff != "" {
		t.Errorf("GET %s (-want +got):\n%s", base, diff)
	}

	r = e.do(t, http.MethodPost, base+":cancel", "")
	wantCode(t, r, http.StatusOK)
	c := r.JSON(t)
	if c["id"] != s["id"] || c["status"] != "SUBSCRIPTION_STATUS_CANCELED" || c["cancelTime"] == nil {
		t.Errorf("POST %s:cancel: got %s, want the subscription canceled", base, r.Body)
	}
	wantRESTError(t, e.do(t, http.MethodGet, base, ""), http.StatusNotFound, codes.NotFound, "")
	wantRESTError(t, e.do(t, http.MethodPost, base+":cancel", "{}"), http.StatusNotFound, codes.NotFound, "")
}

func TestSubscriptionErrors(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	for _, test := range []struct {
		name      string
		accountID string
		plan      string
		code      codes.Code
		field     string
	}{
		{"unknown account", unknownID, "pro", codes.NotFound, ""},
		{"bad plan on unknown account", unknownID, "Pro Plan", codes.InvalidArgument, "plan"},
		{"empty plan", unknownID, "", codes.InvalidArgument, "plan"},
		{"long plan", unknownID, strings.Repeat("p", 65), codes.InvalidArgument, "plan"},
		{"bad account id", "42", "pro", codes.InvalidArgument, "account_id"},
	} {
		t.Run(test.name, func(t *testing.T) {
			_, err := e.sub.CreateSubscription(t.Context(), &shebav1.CreateSubscriptionRequest{AccountId: test.accountID, Plan: test.plan})
			wantGRPCError(t, err, test.code, test.field)
			r := e.do(t, http.MethodPost, "/v1/accounts/"+test.accountID+"/subscription", fmt.Sprintf(`{"plan":%q}`, test.plan))
			httpCode := map[codes.Code]int{codes.InvalidArgument: 400, codes.NotFound: 404}[test.code]
			wantRESTError(t, r, httpCode, test.code, test.field)
		})
	}
	for _, path := range []string{"/v1/accounts/42/subscription", "/v1/accounts/42/subscription:cancel"} {
		method := http.MethodGet
		if strings.HasSuffix(path, ":cancel") {
			method = http.MethodPost
		}
		wantRESTError(t, e.do(t, method, path, ""), http.StatusBadRequest, codes.InvalidArgument, "account_id")
	}
	_, err := e.sub.GetSubscription(t.Context(), &shebav1.GetSubscriptionRequest{AccountId: unknownID})
	wantGRPCError(t, err, codes.NotFound, "")
	_, err = e.sub.CancelSubscription(t.Context(), &shebav1.CancelSubscriptionRequest{AccountId: "nope"})
	wantGRPCError(t, err, codes.InvalidArgument, "account_id")
}

// TestOneActiveSubscriptionUnderConcurrency races 20 creates for one account:
// the database lets exactly one win.
func TestOneActiveSubscriptionUnderConcurrency(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	id := e.newAccount(t, "grace")

	const n = 20
	var wg sync.WaitGroup
	codesSeen := make([]codes.Code, n)
	for i := range n {
		wg.Go(func() {
			_, err := e.sub.CreateSubscription(t.Context(), &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: fmt.Sprintf("plan-%d", i)})
			codesSeen[i] = status.Code(err)
		})
	}
	wg.Wait()
	count := map[codes.Code]int{}
	for _, c := range codesSeen {
		count[c]++
	}
	if diff := cmp.Diff(map[codes.Code]int{codes.OK: 1, codes.AlreadyExists: n - 1}, count); diff != "" {
		t.Errorf("outcomes of %d concurrent creates (-want +got):\n%s", n, diff)
	}
	active := e.count(t, `SELECT count(*) FROM subscriptions WHERE account_id = $1 AND status = 'active'`, id)
	if active != 1 {
		t.Errorf("got %d active subscriptions in the database, want 1", active)
	}
}

// seedSubscriptions makes n subscriptions on one account (all but the last
// canceled), alternating plans "even" and "odd", and returns their ids.
func (e *testEnv) seedSubscriptions(t *testing.T, n int) []string {
	t.Helper()
	id := e.newAccount(t, "heidi")
	ids := make([]string, n)
	for i := range n {
		plan := []string{"even", "odd"}[i%2]
		resp, err := e.sub.CreateSubscription(t.Context(), &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: plan})
		if err != nil {
			t.Fatalf("CreateSubscription %d: %v", i, err)
		}
		ids[i] = resp.GetSubscription().GetId()
		if i < n-1 {
			if _, err := e.sub.CancelSubscription(t.Context(), &shebav1.CancelSubscriptionRequest{AccountId: id}); err != nil {
				t.Fatalf("CancelSubscription %d: %v", i, err)
			}
		}
	}
	return ids
}

// TestListSubscriptionsPaging pages through 250 subscriptions 7 at a time,
// over both transports, and sees each exactly once, newest first.
func TestListSubscriptionsPaging(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ids := e.seedSubscriptions(t, 250)
	// Two subscriptions with the same create_time are ordered by id.
	if _, err := e.pool.Exec(t.Context(), `UPDATE subscriptions SET create_time = (SELECT create_time FROM subscriptions WHERE id = $1) WHERE id = $2`, ids[10], ids[11]); err != nil {
		t.Fatal(err)
	}

	var want []string
	rows, err := e.pool.Query(t.Context(), `SELECT id::text FROM subscriptions ORDER BY create_time DESC, id DESC`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	if len(want) != 250 {
		t.Fatalf("seeded %d subscriptions, want 250", len(want))
	}

	t.Run("gRPC", func(t *testing.T) {
		var got []string
		token, pages := "", 0
		for {
			resp, err := e.sub.ListSubscriptions(t.Context(), &shebav1.ListSubscriptionsRequest{PageSize: 7, PageToken: token})
			if err != nil {
				t.Fatalf("page %d: %v", pages, err)
			}
			pages++
			if n := len(resp.GetSubscriptions()); n > 7 || (n < 7 && resp.GetNextPageToken() != "") {
				t.Fatalf("page %d has %d items and token %q", pages, n, resp.GetNextPageToken())
			}
			for _, s := range resp.GetSubscriptions() {
				got = append(got, s.GetId())
			}
			token = resp.GetNextPageToken()
			if token == "" || pages > 100 {
				break
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ids over all pages (-want +got):\n%s", diff)
		}
		if pages != 36 {
			t.Errorf("got %d pages, want 36", pages)
		}
	})
	t.Run("REST", func(t *testing.T) {
		var got []string
		token := ""
		for pages := 0; pages < 100; pages++ {
			r := e.do(t, http.MethodGet, "/v1/subscriptions?page_size=7&page_token="+url.QueryEscape(token), "")
			wantCode(t, r, http.StatusOK)
			body := r.JSON(t)
			for _, s := range body["subscriptions"].([]any) {
				got = append(got, s.(map[string]any)["id"].(string))
			}
			next, ok := body["nextPageToken"].(string)
			if !ok {
				t.Fatalf("page %d: no nextPageToken in %s", pages, r.Body)
			}
			if token = next; token == "" {
				break
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ids over all pages (-want +got):\n%s", diff)
		}
	})
}

func TestListSubscriptionsFilterAndSizes(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	e.seedSubscriptions(t, 60)

	resp, err := e.sub.ListSubscriptions(t.Context(), &shebav1.ListSubscriptionsRequest{})
	if err != nil {
		t.Fatalf("ListSubscriptions: %v", err)
	}
	if n := len(resp.GetSubscriptions()); n != 50 || resp.GetNextPageToken() == "" {
		t.Errorf("page_size 0: got %d items (token %q), want 50 and a next page", n, resp.GetNextPageToken())
	}
	resp, err = e.sub.ListSubscriptions(t.Context(), &shebav1.ListSubscriptionsRequest{PageSize: 5000})
	if err != nil {
		t.Fatalf("ListSubscriptions: %v", err)
	}
	if n := len(resp.GetSubscriptions()); n != 60 || resp.GetNextPageToken() != "" {
		t.Errorf("page_size 5000: got %d items (token %q), want all 60 and no next page", n, resp.GetNextPageToken())
	}

	var odd []string
	token := ""
	for range 10 {
		resp, err := e.sub.ListSubscriptions(t.Context(), &shebav1.ListSubscriptionsRequest{PageSize: 4, Plan: "odd", PageToken: token})
		if err != nil {
			t.Fatalf("ListSubscriptions odd: %v", err)
		}
		for _, s := range resp.GetSubscriptions() {
			if s.GetPlan() != "odd" {
				t.Errorf("plan filter odd: got plan %q", s.GetPlan())
			}
			odd = append(odd, s.GetId())
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if len(odd) != 30 {
		t.Errorf("plan filter odd: got %d subscriptions, want 30", len(odd))
	}
	r := e.do(t, http.MethodGet, "/v1/subscriptions?plan=none", "")
	wantCode(t, r, http.StatusOK)
	if diff := cmp.Diff(map[string]any{"subscriptions": []any{}, "nextPageToken": ""}, r.JSON(t)); diff != "" {
		t.Errorf("empty list body (-want +got):\n%s", diff)
	}
}

func TestListSubscriptionsBadInput(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	e.seedSubscriptions(t, 3)
	first, err := e.sub.ListSubscriptions(t.Context(), &shebav1.ListSubscriptionsRequest{PageSize: 1, Plan: "even"})
	if err != nil {
		t.Fatalf("ListSubscriptions: %v", err)
	}
	token := first.GetNextPageToken()
	if token == "" {
		t.Fatal("no next page token")
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		t.Fatalf("token %q is not base64url: %v", token, err)
	}
	raw[3] ^= 0x01 // another position, well-formed
	flipped := base64.RawURLEncoding.EncodeToString(raw)

	for _, test := range []struct {
		name  string
		req   *shebav1.ListSubscriptionsRequest
		query string
		field string
	}{
		{"negative page size", &shebav1.ListSubscriptionsRequest{PageSize: -1}, "page_size=-1", "page_size"},
		{"bad plan", &shebav1.ListSubscriptionsRequest{Plan: "Not A Plan"}, "plan=Not+A+Plan", "plan"},
		{"garbage token", &shebav1.ListSubscriptionsRequest{PageToken: "garbage!"}, "page_token=garbage!", "page_token"},
		{"altered token", &shebav1.ListSubscriptionsRequest{PageToken: flipped, Plan: "even"}, "plan=even&page_token=" + flipped, "page_token"},
		{"token of another filter", &shebav1.ListSubscriptionsRequest{PageToken: token, Plan: "odd"}, "plan=odd&page_token=" + token, "page_token"},
		{"token without its filter", &shebav1.ListSubscriptionsRequest{PageToken: token}, "page_token=" + token, "page_token"},
	} {
		t.Run(test.name, func(t *testing.T) {
			_, err := e.sub.ListSubscriptions(t.Context(), test.req)
			wantGRPCError(t, err, codes.InvalidArgument, test.field)
			wantRESTError(t, e.do(t, http.MethodGet, "/v1/subscriptions?"+test.query, ""), http.StatusBadRequest, codes.InvalidArgument, test.field)
		})
	}
	wantRESTError(t, e.do(t, http.MethodGet, "/v1/subscriptions?page_size=ten", ""), http.StatusBadRequest, codes.InvalidArgument, "")
	// The untouched token still works with its filter.
	if _, err := e.sub.ListSubscriptions(t.Context(), &shebav1.ListSubscriptionsRequest{PageSize: 1, Plan: "even", PageToken: token}); err != nil {
		t.Errorf("valid token: %v", err)
	}
}
