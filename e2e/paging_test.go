package e2e

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// withPagingSecret sets paging.secret.
func withPagingSecret(secret string) func(*config.Config) {
	return func(c *config.Config) { c.Paging.Secret = secret }
}

// wantBadToken checks that token is refused with 400 / INVALID_ARGUMENT and
// a page_token violation on both transports.
func (e *testEnv) wantBadToken(t *testing.T, what, token string) {
	t.Helper()
	_, err := e.sub.ListSubscriptions(t.Context(), &shebav1.ListSubscriptionsRequest{PageToken: token})
	wantGRPCError(t, err, codes.InvalidArgument, "page_token")
	r := e.do(t, http.MethodGet, "/v1/subscriptions?page_token="+url.QueryEscape(token), "")
	wantRESTDetails(t, what, r, http.StatusBadRequest, reason.InvalidArgument)
	wantRESTError(t, r, http.StatusBadRequest, codes.InvalidArgument, "page_token")
}

// TestPageTokenSecret checks that page tokens are signed with
// paging.secret: a token works on every replica that shares the secret, is
// 400 on one with another secret, and a server without a secret says so
// once.
func TestPageTokenSecret(t *testing.T) {
	t.Parallel()
	secret := strings.Repeat("5e", 32)
	a := newTestEnv(t, withPagingSecret(secret))
	a.seedSubscriptions(t, 3)
	first, err := a.sub.ListSubscriptions(t.Context(), &shebav1.ListSubscriptionsRequest{PageSize: 1})
	if err != nil || first.GetNextPageToken() == "" {
		t.Fatalf("first page: %v, %v", first, err)
	}
	token := first.GetNextPageToken()

	replica := newTestEnv(t, withPagingSecret(secret))
	if _, err := replica.sub.ListSubscriptions(t.Context(), &shebav1.ListSubscriptionsRequest{PageToken: token}); err != nil {
		t.Errorf("gRPC, same secret on another replica: %v", err)
	}
	wantCode(t, replica.do(t, http.MethodGet, "/v1/subscriptions?page_token="+token, ""), http.StatusOK)

	other := newTestEnv(t, withPagingSecret(strings.Repeat("6f", 32)))
	other.wantBadToken(t, "another secret", token)

	// Every other token problem is 400 too, never 500.
	for _, bad := range []string{
		"%%%", "not base64!", token + "=", token[:len(token)-1], token + "AAAA",
		strings.ToUpper(token), "AA", strings.Repeat("A", 55), "\u00e9t\u00e9",
	} {
		a.wantBadToken(t, bad, bad)
	}
	r := a.do(t, http.MethodGet, "/v1/subscriptions?plan=even&page_token="+token, "")
	wantRESTError(t, r, http.StatusBadRequest, codes.InvalidArgument, "page_token")

	const warning = "paging.secret is not set"
	if n := strings.Count(a.logs.String(), warning); n != 0 {
		t.Errorf("with paging.secret: %d warnings, want none", n)
	}
	unset := newTestEnv(t)
	if n := strings.Count(unset.logs.String(), warning); n != 1 {
		t.Errorf("without paging.secret: %d warnings %q, want exactly one; log:\n%s", n, warning, unset.logs.String())
	}
	unset.wantBadToken(t, "a token of another process", token)
}
