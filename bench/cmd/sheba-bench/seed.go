package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
)

const (
	// benchPassword is the password of every seeded account.
	benchPassword = "bench-password"
	// benchPasswordHash is an argon2id hash of benchPassword with sheba's
	// parameters for new hashes (19 MiB, 2 passes, 1 lane), computed once, so
	// that seeding costs no hashing and a login costs what a real one does.
	benchPasswordHash = "$argon2id$v=19$m=19456,t=2,p=1$zPHBFNmyNGZosSFKYwBgdw$kYmQYHyv9FbFX1o3deU6EMjPw9WEiubjEbw6CJV+0HM"
	// loginUsername is the account that login-overload logs in as.
	loginUsername = "bench-login"
	// accountIDPrefix starts the id of every seeded account: the last group
	// is the account's number in decimal, zero-padded to 12 digits, so
	// pgbench can build an id from a random integer.
	accountIDPrefix = "00000000-0000-4000-8000-"
)

// accountID is the id of seeded account n (1-based).
func accountID(n int) string {
	return fmt.Sprintf("%s%012d", accountIDPrefix, n)
}

// insertAccounts inserts $3 accounts bench-1 … bench-$3, their ids
// accountID(1) … , with the password hash $2 (the id prefix $1).
const insertAccounts = `
	INSERT INTO accounts (id, username, password_hash)
	SELECT ($1 || lpad(g::text, 12, '0'))::uuid, 'bench-' || g, $2
	FROM generate_series(1, $3::int) AS g`

// seed inserts n accounts with an active "pro" subscription each, and the
// login account, straight in SQL: generate_series is thousands of times
// faster than n CreateAccount calls, each of which would hash a password.
func seed(ctx context.Context, url string, n int) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	defer conn.Close(ctx)
	stmts := []struct {
		sql  string
		args []any
	}{
		{insertAccounts, []any{accountIDPrefix, benchPasswordHash, n}},
		{`INSERT INTO subscriptions (account_id, plan, status)
		  SELECT id, 'pro', 'active' FROM accounts WHERE username LIKE 'bench-%'`, nil},
		{`INSERT INTO accounts (username, password_hash) VALUES ($1, $2)`, []any{loginUsername, benchPasswordHash}},
		{`ANALYZE`, nil},
	}
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s.sql, s.args...); err != nil {
			return fmt.Errorf("seed: %s: %w", strings.Fields(s.sql)[0], err)
		}
	}
	return nil
}

// writeIDs writes the ids of the n seeded accounts, one a line, for wrk.
func writeIDs(path string, n int) error {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		b.WriteString(accountID(i))
		b.WriteByte('\n')
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// pgbenchScript is the pgbench transaction of the get-subscription
// baseline: the store's GetActiveSubscription SELECT, word for word, on a
// random seeded account. With -M prepared, :n becomes a bound parameter, as
// the account id is in pgx's prepared statement; building the uuid from it
// is the only extra work.
func pgbenchScript(n int) string {
	return fmt.Sprintf(`\set n random(1, %d)
SELECT id, account_id, plan, status, create_time, cancel_time FROM subscriptions WHERE account_id = ('%s' || lpad(:n::text, 12, '0'))::uuid AND status = 'active';
`, n, accountIDPrefix)
}
