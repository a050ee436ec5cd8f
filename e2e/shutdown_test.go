package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/shebasvc/sheba/e2e/shebaproc"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/store/storetest"
	"github.com/shebasvc/sheba/webhooks/webhookstest"
)

// TestShutdownBound runs sheba as its own process with something in every
// part of the shutdown when SIGTERM comes
// (docs/operations.md#graceful-shutdown): a gRPC and a REST GetAccount
// waiting on a lock the test holds on the accounts table (limits.timeout is
// a minute, so their deadline does not end them first), a webhook attempt
// whose receiver has not answered, its outcome to be written to
// webhook_deliveries, locked too, and traces for an OTLP collector.
//
//   - released in time: the locks go and the receiver answers 500 ms after
//     the signal, and the collector answers at once; both calls answer,
//     the delivery SUCCEEDED with one request, and sheba exits 0 within
//     the bound (10s, so that a slow machine has room);
//   - held past the bound: nothing is released and the collector never
//     answers; sheba exits 1 within shutdown.timeout, 2s (plus a margin for
//     a loaded machine), with one line saying the shutdown was cut, and no
//     query of sheba is left waiting on the locks in Postgres.
//
// Not parallel: the exit is timed.
func TestShutdownBound(t *testing.T) {
	bin, err := shebaBinary()
	if err != nil {
		t.Fatal(err)
	}
	for _, test := range []struct {
		name    string
		timeout time.Duration // shutdown.timeout
		release time.Duration // after the signal; 0: only after the exit
	}{
		{"released in time", 10 * time.Second, 500 * time.Millisecond},
		{"held past the bound", 2 * time.Second, 0},
	} {
		t.Run(test.name, func(t *testing.T) {
			timeout := test.timeout
			release := make(chan struct{})
			releaseOnce := sync.OnceFunc(func() { close(release) })
			receiver := webhookstest.NewReceiver(t, func(int, http.ResponseWriter) int {
				<-release
				return http.StatusNoContent
			})
			var traces http.Handler = &otlpReceiver{}
			if test.release == 0 {
				traces = http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release })
			}
			collector := httptest.NewServer(traces)
			t.Cleanup(collector.Close)
			// Registered last, so it runs first: the servers' Close waits
			// for their handlers.
			t.Cleanup(releaseOnce)

			dbURL := storetest.NewDatabase(t)
			p := shebaproc.New(t, bin, "DATABASE_URL="+dbURL, keyEnv(),
				"SHEBA_SHUTDOWN_TIMEOUT="+timeout.String(), "SHEBA_LIMITS_TIMEOUT=1m",
				"SHEBA_WEBHOOKS_ALLOW_PRIVATE_NETWORKS=true",
				"OTEL_EXPORTER_OTLP_ENDPOINT="+collector.URL, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf")
			p.Args = []string{"serve", "--migrate"}
			p.Start(t)
			p.WaitReady(t, 20*time.Second)
			rest := "http://" + p.HTTPAddr

			conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), withKey(testKey))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			endpoint, _ := json.Marshal(map[string]any{"url": receiver.URL, "eventTypes": []string{"account.created"}})
			if err := restDo(t.Context(), http.MethodPost, rest+"/v1/webhookEndpoints", string(endpoint)); err != nil {
				t.Fatalf("create webhook endpoint: %v", err)
			}
			account := shebav1.NewAccountServiceClient(conn)
			created, err := account.CreateAccount(t.Context(), &shebav1.CreateAccountRequest{Username: "locked", Password: "correct horse"})
			if err != nil {
				t.Fatalf("CreateAccount: %v", err)
			}
			id := created.GetAccount().GetId()
			waitFor(t, 20*time.Second, "the webhook attempt at the receiver", func() bool { return len(receiver.Requests()) == 1 })

			db, err := pgx.Connect(t.Context(), dbURL)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close(context.WithoutCancel(t.Context()))
			lock, err := db.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := lock.Exec(t.Context(), `LOCK TABLE accounts, webhook_deliveries IN ACCESS EXCLUSIVE MODE`); err != nil {
				t.Fatal(err)
			}
			unlock := sync.OnceFunc(func() { _ = lock.Rollback(context.WithoutCancel(t.Context())) })
			defer unlock()

			callCtx, cancelCalls := context.WithTimeout(context.WithoutCancel(t.Context()), time.Minute)
			defer cancelCalls()
			grpcErr := make(chan error, 1)
			go func() {
				_, err := account.GetAccount(callCtx, &shebav1.GetAccountRequest{AccountId: id})
				grpcErr <- err
			}()
			restErr := make(chan error, 1)
			go func() { restErr <- restDo(callCtx, http.MethodGet, rest+"/v1/accounts/"+id, "") }()
			// Sessions of this database waiting for a lock.
			lockWaits := func() int {
				var n int
				err := db.QueryRow(t.Context(), `
					SELECT count(*) FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			// Sessions waiting for the accounts table. pg_stat_activity's
			// query cannot tell them: a connection new to GetAccount waits
			// while pgx prepares it, and its query column still shows the
			// connection's last statement.
			accountWaits := func() int {
				var n int
				err := db.QueryRow(t.Context(), `
					SELECT count(DISTINCT pid) FROM pg_locks
					WHERE NOT granted AND relation = 'accounts'::regclass`).Scan(&n)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			for deadline := time.Now().Add(30 * time.Second); accountWaits() < 2; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("both calls waiting on the lock: not within 30s; sessions:\n%s\nlog:\n%s", sessions(t, db), p.Logs())
				}
			}

			start := time.Now()
			p.Signal(t, syscall.SIGTERM)
			if test.release > 0 {
				time.Sleep(test.release)
				unlock()
				releaseOnce()
			}
			// Far past the bound, so that a slow exit is measured, not
			// killed.
			code := p.Wait(t, time.Minute)
			took := time.Since(start)
			t.Logf("exit status %d %v after SIGTERM (shutdown.timeout %v)", code, took, timeout)
			cut := cutLines(p.Logs())

			if test.release > 0 {
				if code != 0 || took > timeout {
					t.Errorf("got exit status %d after %v, want 0 within %v; log:\n%s", code, took, timeout, p.Logs())
				}
				if len(cut) != 0 {
					t.Errorf("got %q, want no line about a cut", cut)
				}
				if err := <-grpcErr; err != nil {
					t.Errorf("gRPC GetAccount across the shutdown: %v", err)
				}
				if err := <-restErr; err != nil {
					t.Errorf("REST GetAccount across the shutdown: %v", err)
				}
				var state string
				if err := db.QueryRow(t.Context(), `SELECT state FROM webhook_deliveries`).Scan(&state); err != nil || state != "succeeded" {
					t.Errorf("delivery: got state %q (%v), want succeeded", state, err)
				}
				if n := len(receiver.Requests()); n != 1 {
					t.Errorf("receiver got %d requests, want 1", n)
				}
				return
			}
			// The cut itself takes a moment; a loaded machine adds some.
			if limit := timeout + 1500*time.Millisecond; code != 1 || took > limit {
				t.Errorf("got exit status %d after %v, want 1 within %v; log:\n%s", code, took, limit, p.Logs())
			}
			if len(cut) != 1 {
				t.Errorf("got %d lines about the cut %q, want one; log:\n%s", len(cut), cut, p.Logs())
			}
			// Postgres does not notice a client gone while its query waits
			// on a lock: only a cancel request ends the wait.
			waitFor(t, 5*time.Second, "no query of sheba waiting on the locks after the exit", func() bool { return lockWaits() == 0 })
		})
	}
}

// sessions describes the sessions of db's database, for a failure's message.
func sessions(t *testing.T, db *pgx.Conn) string {
	rows, err := db.Query(t.Context(), `
		SELECT coalesce(state, ''), coalesce(wait_event_type, ''), left(query, 120)
		FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for rows.Next() {
		var state, wait, query string
		if err := rows.Scan(&state, &wait, &query); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "  %s | %s | %s\n", state, wait, query)
	}
	return b.String()
}

// cutLines returns the lines of log that say the shutdown was cut.
func cutLines(log string) []string {
	var lines []string
	for line := range strings.Lines(log) {
		if strings.HasPrefix(line, "sheba: ") && strings.Contains(line, "shutdown.timeout") {
			lines = append(lines, strings.TrimSpace(line))
		}
	}
	return lines
}

// restDo sends a request with the test key and a JSON body (none if "")
// and reads the answer; anything but a 200 is an error. Unlike
// testEnv.do, it may run on any goroutine.
func restDo(ctx context.Context, method, url, body string) error {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("X-Api-Key", testKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, answer)
	}
	return nil
}
