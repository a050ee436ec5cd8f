package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

func TestPing(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)

	resp, err := e.ping.Ping(t.Context(), &shebav1.PingRequest{})
	if err != nil {
		t.Fatalf("gRPC Ping: %v", err)
	}
	if got := resp.GetMessage(); got != "pong" {
		t.Errorf("gRPC Ping: got %q, want %q", got, "pong")
	}

	r := e.do(t, http.MethodGet, "/v1/ping", "")
	wantCode(t, r, http.StatusOK)
	if diff := cmp.Diff(map[string]any{"message": "pong"}, r.JSON(t)); diff != "" {
		t.Errorf("GET /v1/ping body (-want +got):\n%s", diff)
	}
}

func TestCreateAccountAndGet(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	before := time.Now().Add(-time.Second)

	// gRPC
	created, err := e.account.CreateAccount(t.Context(), &shebav1.CreateAccountRequest{Username: "alice", Password: "correct horse"})
	if err != nil {
		t.Fatalf("CreateAccount: %v", err)
	}
	a := created.GetAccount()
	if a.GetUsername() != "alice" || len(a.GetId()) != 36 || a.GetCreateTime().AsTime().Before(before) {
		t.Fatalf("CreateAccount: got %v, want alice with a UUID and a recent create_time", a)
	}
	got, err := e.account.GetAccount(t.Context(), &shebav1.GetAccountRequest{AccountId: a.GetId()})
	if err != nil {
		t.Fatalf("GetAccount: %v", err)
	}
	if got.GetAccount().GetId() != a.GetId() || got.GetAccount().GetUsername() != "alice" {
		t.Errorf("GetAccount: got %v, want %v", got.GetAccount(), a)
	}

	// REST: the bare Account, no password in any form.
	r := e.do(t, http.MethodPost, "/v1/accounts", `{"username":"bob.b_1-x","password":"12345678"}`)
	wantCode(t, r, http.StatusOK)
	body := r.JSON(t)
	if body["username"] != "bob.b_1-x" || body["id"] == nil || body["createTime"] == nil {
		t.Fatalf("POST /v1/accounts: got %s, want a bare Account", r.Body)
	}
	if strings.Contains(strings.ToLower(string(r.Body)), "password") || strings.Contains(string(r.Body), "12345678") {
		t.Errorf("POST /v1/accounts: body %s mentions the password", r.Body)
	}
	r = e.do(t, http.MethodGet, "/v1/accounts/"+body["id"].(string), "")
	wantCode(t, r, http.StatusOK)
	if diff := cmp.Diff(body, r.JSON(t)); diff != "" {
		t.Errorf("GET account differs from the created one (-want +got):\n%s", diff)
	}
	// An upper-case UUID names the same account.
	r = e.do(t, http.MethodGet, "/v1/accounts/"+strings.ToUpper(body["id"].(string)), "")
	wantCode(t, r, http.StatusOK)

	// The stored password is an argon2id hash, not the password.
	var hash string
	if err := e.pool.QueryRow(t.Context(), `SELECT password_hash FROM accounts WHERE username = 'bob.b_1-x'`).Scan(&hash); err != nil {
		t.Fatalf("read hash: %v", err)
	}
	if !strings.HasPrefix(hash, "$argon2id$") || strings.Contains(hash, "12345678") {
		t.Errorf("stored hash %q is not an argon2id hash", hash)
	}
}

func TestCreateAccountErrors(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	if _, err := e.account.CreateAccount(t.Context(), &shebav1.CreateAccountRequest{Username: "taken", Password: "password1"}); err != nil {
		t.Fatalf("CreateAccount: %v", err)
	}
	for _, test := range []struct {
		name     string
		username string
		password string
		code     codes.Code
		field    string
	}{
		{"short username", "ab", "password1", codes.InvalidArgument, "username"},
		{"long username", strings.Repeat("a", 65), "password1", codes.InvalidArgument, "username"},
		{"upper case username", "Alice", "password1", codes.InvalidArgument, "username"},
		{"username with space", "al ice", "password1", codes.InvalidArgument, "username"},
		{"empty username", "", "password1", codes.InvalidArgument, "username"},
		{"short password", "alice", "1234567", codes.InvalidArgument, "password"},
		{"long password", "alice", strings.Repeat("p", 257), codes.InvalidArgument, "password"},
		{"taken username", "taken", "password1", codes.AlreadyExists, ""},
	} {
		t.Run(test.name, func(t *testing.T) {
			_, err := e.account.CreateAccount(t.Context(), &shebav1.CreateAccountRequest{Username: test.username, Password: test.password})
			wantGRPCError(t, err, test.code, test.field)

			body := fmt.Sprintf(`{"username":%q,"password":%q}`, test.username, test.password)
			r := e.do(t, http.MethodPost, "/v1/accounts", body)
			httpCode := map[codes.Code]int{codes.InvalidArgument: 400, codes.AlreadyExists: 409}[test.code]
			wantRESTError(t, r, httpCode, test.code, test.field)
		})
	}
	// Nothing was created by the failed calls.
	n := e.count(t, `SELECT count(*) FROM accounts`)
	if n != 1 {
		t.Errorf("got %d accounts after failed creates, want 1", n)
	}
}

func TestLogin(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	created, err := e.account.CreateAccount(t.Context(), &shebav1.CreateAccountRequest{Username: "carol", Password: "s3cret-pass"})
	if err != nil {
		t.Fatalf("CreateAccount: %v", err)
	}

	resp, err := e.account.Login(t.Context(), &shebav1.LoginRequest{Username: "carol", Password: "s3cret-pass"})
	if err != nil {
		t.Fatalf("Login: %v", err)
	}
	if resp.GetAccount().GetId() != created.GetAccount().GetId() {
		t.Errorf("Login: got account %v, want %v", resp.GetAccount(), created.GetAccount())
	}
	r := e.do(t, http.MethodPost, "/v1/accounts:login", `{"username":"carol","password":"s3cret-pass"}`)
	wantCode(t, r, http.StatusOK)
	account, ok := r.JSON(t)["account"].(map[string]any)
	if !ok || account["id"] != created.GetAccount().GetId() {
		t.Errorf(`POST /v1/accounts:login: got %s, want {"account":{...}}`, r.Body)
	}

	for _, test := range []struct {
		name, username, password string
	}{
		{"wrong password", "carol", "wrong-pass"},
		{"unknown user", "nobody", "s3cret-pass"},
	} {
		t.Run(test.name, func(t *testing.T) {
			_, err := e.account.Login(t.Context(), &shebav1.LoginRequest{Username: test.username, Password: test.password})
			wantGRPCError(t, err, codes.Unauthenticated, "")
			r := e.do(t, http.MethodPost, "/v1/accounts:login", fmt.Sprintf(`{"username":%q,"password":%q}`, test.username, test.password))
			st := wantRESTError(t, r, http.StatusUnauthorized, codes.Unauthenticated, "")
			if st.GetMessage() != "invalid username or password" {
				t.Errorf("got message %q, want %q", st.GetMessage(), "invalid username or password")
			}
		})
	}
	t.Run("invalid input", func(t *testing.T) {
		_, err := e.account.Login(t.Context(), &shebav1.LoginRequest{Username: "c", Password: "s3cret-pass"})
		wantGRPCError(t, err, codes.InvalidArgument, "username")
		r := e.do(t, http.MethodPost, "/v1/accounts:login", `{"username":"carol"}`)
		wantRESTError(t, r, http.StatusBadRequest, codes.InvalidArgument, "password")
	})
}

// TestLoginTiming checks that an unknown username costs a password
// verification, as a wrong password does: without the dummy hash it would
// answer in microseconds. The bound is a generous ratio, not a wall-clock
// limit.
func TestLoginTiming(t *testing.T) {
	e := newTestEnv(t)
	if _, err := e.account.CreateAccount(t.Context(), &shebav1.CreateAccountRequest{Username: "dave", Password: "s3cret-pass"}); err != nil {
		t.Fatalf("CreateAccount: %v", err)
	}
	measure := func(username string) time.Duration {
		best := time.Duration(1<<63 - 1)
		for range 5 {
			start := time.Now()
			_, err := e.account.Login(t.Context(), &shebav1.LoginRequest{Username: username, Password: "wrong-pass"})
			wantGRPCError(t, err, codes.Unauthenticated, "")
			best = min(best, time.Since(start))
		}
		return best
	}
	wrong, unknown := measure("dave"), measure("nobody")
	if unknown < wrong/3 {
		t.Errorf("unknown user took %v, wrong password %v: an unknown user must cost a hash verification too", unknown, wrong)
	}
}

func TestGetAccountErrors(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	for _, test := range []struct {
		name, id string
		code     codes.Code
		httpCode int
	}{
		{"not a UUID", "not-a-uuid", codes.InvalidArgument, 400},
		{"UUID without dashes", "0123456789abcdef0123456789abcdef", codes.InvalidArgument, 400},
		{"unknown", "00000000-0000-4000-8000-000000000000", codes.NotFound, 404},
	} {
		t.Run(test.name, func(t *testing.T) {
			_, err := e.account.GetAccount(t.Context(), &shebav1.GetAccountRequest{AccountId: test.id})
			field := ""
			if test.code == codes.InvalidArgument {
				field = "account_id"
			}
			wantGRPCError(t, err, test.code, field)
			wantRESTError(t, e.do(t, http.MethodGet, "/v1/accounts/"+test.id, ""), test.httpCode, test.code, field)
		})
	}
}
