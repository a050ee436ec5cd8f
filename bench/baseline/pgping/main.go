// Command pgping is the bare net/http + pgx baseline of `make bench`, a
// service written the plain way with nothing between the request and the
// query:
//
//   - GET /readyz pings Postgres through a pgxpool of the same size as
//     sheba's and answers 200 {"status":"ok"} or 503
//     {"status":"unavailable"};
//   - GET /v1/accounts/{id}/subscription runs the same SELECT as sheba's
//     store (the active subscription of the account, by the partial unique
//     index) and writes the same JSON document sheba answers, or 404.
//
// Every other path is 404. The database URL comes from DATABASE_URL.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	maxConns := flag.Int("max-conns", 16, "largest number of pool connections (sheba's database.max_conns)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr, int32(*maxConns), os.Getenv("DATABASE_URL")); err != nil {
		fmt.Fprintln(os.Stderr, "pgping:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr string, maxConns int32, url string) error {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()

	ok := []byte(`{"status":"ok"}` + "\n")
	notFound := []byte(`{"code":5,"message":"no active subscription","details":[]}` + "\n")
	internal := []byte(`{"code":13,"message":"internal error","details":[]}` + "\n")
	down := []byte(`{"status":"unavailable"}` + "\n")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := pool.Ping(r.Context()); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write(down)
			return
		}
		_, _ = w.Write(ok)
	})
	mux.HandleFunc("GET /v1/accounts/{id}/subscription", func(w http.ResponseWriter, r *http.Request) {
		var sub subscription
		var created time.Time
		err := pool.QueryRow(r.Context(), `
			SELECT id, account_id, plan, status, create_time
			FROM subscriptions
			WHERE account_id = $1 AND status = 'active'`,
			r.PathValue("id")).Scan(&sub.ID, &sub.AccountID, &sub.Plan, &sub.Status, &created)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write(notFound)
			return
		case err != nil:
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write(internal)
			return
		}
		// The status as sheba's enum name, the time as protojson writes a
		// Timestamp (UTC, 0, 3, 6 or 9 fractional digits).
		sub.Status = "SUBSCRIPTION_STATUS_" + strings.ToUpper(sub.Status)
		sub.CreateTime = protoTime(created)
		_ = json.NewEncoder(w).Encode(&sub)
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// subscription is the JSON of a sheba.v1.Subscription as the REST API
// writes it for an active one (no cancelTime).
type subscription struct {
	ID         string `json:"id"`
	AccountID  string `json:"accountId"`
	Plan       string `json:"plan"`
	Status     string `json:"status"`
	CreateTime string `json:"createTime"`
}

// protoTime formats t as protojson formats a google.protobuf.Timestamp.
func protoTime(t time.Time) string {
	t = t.UTC()
	base := t.Format("2006-01-02T15:04:05")
	switch ns := t.Nanosecond(); {
	case ns == 0:
		return base + "Z"
	case ns%1_000_000 == 0:
		return fmt.Sprintf("%s.%03dZ", base, ns/1_000_000)
	case ns%1_000 == 0:
		return fmt.Sprintf("%s.%06dZ", base, ns/1_000)
	default:
		return fmt.Sprintf("%s.%09dZ", base, ns)
	}
}
