package e2e

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// The fuzz targets run against one real service each (started once per
// target, not per input), over a database of their own. `make test` runs
// their seed corpora (testdata/fuzz/<name>); `make fuzz` explores.
// FuzzRESTBody, which needs the gateway alone, is in server/gateway.

// fuzzPagingSecret is the paging.secret of the fuzzed service.
var fuzzPagingSecret = strings.Repeat("f0", 32)

// FuzzPageToken sends page tokens and plans to ListSubscriptions over both
// transports: the answer is 200 or 400, never anything else, and both
// transports agree.
func FuzzPageToken(f *testing.F) {
	e := newTestEnv(f, withPagingSecret(fuzzPagingSecret))
	ctx := context.Background()
	acct, err := e.account.CreateAccount(ctx, &shebav1.CreateAccountRequest{Username: "fuzz", Password: "password1"})
	if err != nil {
		f.Fatal(err)
	}
	for _, plan := range []string{"pro", "basic", "pro"} {
		if _, err := e.sub.CreateSubscription(ctx, &shebav1.CreateSubscriptionRequest{AccountId: acct.GetAccount().GetId(), Plan: plan}); err != nil {
			f.Fatal(err)
		}
		if _, err := e.sub.CancelSubscription(ctx, &shebav1.CancelSubscriptionRequest{AccountId: acct.GetAccount().GetId()}); err != nil {
			f.Fatal(err)
		}
	}
	// Real tokens of this run, for the fuzzer to alter.
	for _, plan := range []string{"", "pro"} {
		page, err := e.sub.ListSubscriptions(ctx, &shebav1.ListSubscriptionsRequest{PageSize: 1, Plan: plan})
		if err != nil || page.GetNextPageToken() == "" {
			f.Fatalf("list %q: %v, %v", plan, page, err)
		}
		f.Add(page.GetNextPageToken(), plan)
	}
	f.Fuzz(func(t *testing.T, token, plan string) {
		q := url.Values{"page_size": {"1"}, "page_token": {token}, "plan": {plan}}
		r := e.do(t, http.MethodGet, "/v1/subscriptions?"+q.Encode(), "")
		switch r.Code {
		case http.StatusOK:
		case http.StatusBadRequest:
			wantDetails(t, "REST 400", status.FromProto(r.Status(t)), false, reason.InvalidArgument, r.Header.Values("Retry-After"))
		default:
			t.Fatalf("REST token %q plan %q: got HTTP %d, want 200 or 400; body %q", token, plan, r.Code, r.Body)
		}
		// A proto string must be UTF-8: the gRPC client cannot send
		// anything else.
		if !utf8.ValidString(token) || !utf8.ValidString(plan) {
			return
		}
		_, err := e.sub.ListSubscriptions(t.Context(), &shebav1.ListSubscriptionsRequest{PageSize: 1, PageToken: token, Plan: plan})
		switch code := status.Code(err); {
		case code != codes.OK && code != codes.InvalidArgument:
			t.Fatalf("gRPC token %q plan %q: got %v, want OK or InvalidArgument", token, plan, err)
		case (code == codes.OK) != (r.Code == http.StatusOK):
			t.Fatalf("token %q plan %q: gRPC %v but REST %d", token, plan, code, r.Code)
		}
	})
}
