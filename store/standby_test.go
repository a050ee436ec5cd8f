package store_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
	"github.com/shebasvc/sheba/store/storetest/pgcluster"
)

func openStandby(t *testing.T, url string, tp trace.TracerProvider) *store.Standby {
	t.Helper()
	s, err := store.OpenStandby(t.Context(), url, 2, tp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestStandbyNotInRecovery checks that a server that is not a standby
// has lag 0, and that the gauge says so.
func TestStandbyNotInRecovery(t *testing.T) {
	t.Parallel()
	s := openStandby(t, storetest.NewDatabase(t), tracenoop.NewTracerProvider())
	conn, err := s.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if conn.Lag() != 0 {
		t.Errorf("got lag %v, want 0", conn.Lag())
	}
	if got := testutil.ToFloat64(s.Collector()); got != 0 {
		t.Errorf("sheba_db_standby_lag_seconds: got %v, want 0", got)
	}
}

// TestStandbyContext checks that the store's methods called with a
// standby connection's context run on it, except in a transaction, which
// runs on the primary.
func TestStandbyContext(t *testing.T) {
	t.Parallel()
	primaryURL, standbyURL := storetest.NewDatabase(t), storetest.NewDatabase(t)
	pool, err := pgxpool.New(t.Context(), primaryURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st := store.New(pool)
	a, err := st.CreateAccount(t.Context(), "primary-only", "x")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := openStandby(t, standbyURL, tracenoop.NewTracerProvider()).Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	ctx := conn.Context(t.Context())
	if _, err := st.GetAccount(ctx, a.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetAccount on the standby: got %v, want ErrNotFound", err)
	}
	err = st.InTx(ctx, func(ctx context.Context) error {
		_, err := st.GetAccount(ctx, a.ID)
		return err
	})
	if err != nil {
		t.Errorf("GetAccount in InTx: got %v, want it found on the primary", err)
	}
}

// TestStandbyLagChecked checks that a connection's lag is measured when
// it is made, and again when it is used only if its measure is a second
// old or more.
func TestStandbyLagChecked(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	s := openStandby(t, storetest.NewDatabase(t), tp)
	// Queries are traced within a call's span.
	ctx, span := tp.Tracer("test").Start(t.Context(), "call")
	defer span.End()
	var clock atomic.Int64
	store.SetStandbyClock(s, func() time.Duration { return time.Duration(clock.Load()) })
	// The spans of the lag query, not of its preparation.
	measures := func() int {
		n := 0
		for _, span := range spans.Ended() {
			lag, prepare := false, false
			for _, a := range span.Attributes() {
				lag = lag || strings.Contains(a.Value.Emit(), "pg_is_in_recovery")
				prepare = prepare || a.Key == "pgx.prepare_stmt.name"
			}
			if lag && !prepare {
				n++
			}
		}
		return n
	}
	for _, step := range []struct {
		advance time.Duration
		want    int
	}{
		{0, 1},                      // made: measured
		{999 * time.Millisecond, 1}, // used: measured 999ms ago
		{time.Millisecond, 2},       // used: measured 1s ago
		{0, 2},
	} {
		clock.Add(int64(step.advance))
		conn, err := s.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conn.Release()
		if got := measures(); got != step.want {
			t.Fatalf("at %v: got %d measures, want %d", time.Duration(clock.Load()), got, step.want)
		}
	}
	if got := s.Pool().Stat().NewConnsCount(); got != 1 {
		t.Errorf("got %d connections made, want 1", got)
	}
}

// TestStandbyDown checks that a standby that cannot be reached is left
// alone for a second after each failure.
func TestStandbyDown(t *testing.T) {
	t.Parallel()
	// Port 1 on 127.0.0.1 refuses connections.
	s := openStandby(t, "postgres://sheba@127.0.0.1:1/sheba?connect_timeout=1", tracenoop.NewTracerProvider())
	var clock atomic.Int64
	store.SetStandbyClock(s, func() time.Duration { return time.Duration(clock.Load()) })
	for _, step := range []struct {
		advance  time.Duration
		want     error
		attempts int64
	}{
		{0, store.ErrUnavailable, 1},
		{999 * time.Millisecond, store.ErrStandbyDown, 1},
		{time.Millisecond, store.ErrUnavailable, 2},
	} {
		clock.Add(int64(step.advance))
		_, err := s.Acquire(t.Context())
		if !errors.Is(err, step.want) {
			t.Errorf("at %v: got %v, want %v", time.Duration(clock.Load()), err, step.want)
		}
		if got := s.Pool().Stat().NewConnsCount(); got != step.attempts {
			t.Errorf("at %v: got %d connection attempts, want %d", time.Duration(clock.Load()), got, step.attempts)
		}
	}
}

// TestStandbyLag measures the lag of a real streaming standby
// (docs/operations.md#reading-from-standbys): 0 while it has replayed all
// it received, the primary being idle; the age of its last replayed
// transaction while replay is paused behind what it received, or while it
// does not stream (its primary stopped).
func TestStandbyLag(t *testing.T) {
	t.Parallel()
	c := pgcluster.Start(t)
	s := openStandby(t, c.Standby.URL(), tracenoop.NewTracerProvider())
	var clock atomic.Int64
	store.SetStandbyClock(s, func() time.Duration { return time.Duration(clock.Load()) })
	// lag measures again: a second passes on the standby's clock.
	lag := func() time.Duration {
		t.Helper()
		clock.Add(int64(time.Second))
		conn, err := s.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		return conn.Lag()
	}
	// waitLag waits until the lag is what want says, and returns it.
	waitLag := func(what string, want func(time.Duration) bool) time.Duration {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			l := lag()
			if want(l) {
				return l
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: lag %v after 30 s", what, l)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	behind := func(l time.Duration) bool { return l > 0 && l != store.UnknownLag }

	// A transaction replayed, for the lag to be measured from.
	c.Primary.Exec(t, `INSERT INTO accounts (username, password_hash) VALUES ('first', 'x')`)
	c.WaitReplayed(t)
	waitLag("caught up, the primary idle", func(l time.Duration) bool { return l == 0 })

	c.Standby.PauseReplay(t)
	c.Primary.Exec(t, `INSERT INTO accounts (username, password_hash) VALUES ('second', 'x')`)
	l := waitLag("replay paused behind a write", behind)
	if got := testutil.ToFloat64(s.Collector()); got != l.Seconds() {
		t.Errorf("sheba_db_standby_lag_seconds: got %v, want %v", got, l.Seconds())
	}
	c.Standby.ResumeReplay(t)
	c.WaitReplayed(t)
	waitLag("replay resumed", func(l time.Duration) bool { return l == 0 })

	// Not streaming: what it replayed may be all it will ever get, or not.
	c.Primary.Stop(t, pgcluster.Fast)
	waitLag("the primary stopped", behind)
}
