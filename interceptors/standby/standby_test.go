package standby_test

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/interceptortest"
	"github.com/shebasvc/sheba/interceptors/standby"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
)

func TestMain(m *testing.M) {
	os.Exit(storetest.Run(m))
}

// The methods of the tests: one that reads, one that writes, one neither.
const (
	readMethod  = "/test.v1.Test/Get"
	writeMethod = "/test.v1.Test/Update"
	otherMethod = "/test.v1.Test/Other"
)

var methods = standby.Methods{
	ReadOnly: map[string]bool{readMethod: true},
	Writes:   map[string]bool{writeMethod: true},
}

// The accounts of the tests: bothID is on the primary and the "standby"
// (a database of its own, with other usernames, so an answer says where it
// was read); primaryID is on the primary alone.
const (
	bothID    = "00000000-0000-4000-8000-000000000001"
	primaryID = "00000000-0000-4000-8000-000000000002"
	unknownID = "00000000-0000-4000-8000-000000000003"
)

// env is a primary and a stand-in standby: two databases of the test
// cluster. A server that is not in recovery has lag 0.
type env struct {
	primary     *store.Store
	standby     *store.Standby
	standbyName string // the standby database's name
	admin       *pgxpool.Pool
}

func newEnv(t *testing.T) env {
	t.Helper()
	primaryURL, standbyURL := storetest.NewDatabase(t), storetest.NewDatabase(t)
	insert := func(url string, rows ...string) string {
		pool, err := pgxpool.New(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		for i := 0; i < len(rows); i += 2 {
			if _, err := pool.Exec(t.Context(), `INSERT INTO accounts (id, username, password_hash) VALUES ($1, $2, 'x')`, rows[i], rows[i+1]); err != nil {
				t.Fatal(err)
			}
		}
		var name string
		if err := pool.QueryRow(t.Context(), `SELECT current_database()`).Scan(&name); err != nil {
			t.Fatal(err)
		}
		return name
	}
	insert(primaryURL, bothID, "on-primary", primaryID, "primary-only")
	name := insert(standbyURL, bothID, "on-standby")
	pool, err := pgxpool.New(t.Context(), primaryURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return env{primary: store.New(pool), standby: openStandby(t, standbyURL), standbyName: name, admin: pool}
}

func openStandby(t *testing.T, url string) *store.Standby {
	t.Helper()
	s, err := store.OpenStandby(t.Context(), url, 2, tracenoop.NewTracerProvider())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// getAccount is the handler of readMethod: the username of the account
// req names, as the primary store reads it with the call's context.
func (e env) getAccount(ctx context.Context, req any) (any, error) {
	a, err := e.primary.GetAccount(ctx, req.(string))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, status.Error(codes.NotFound, "not found")
	case errors.Is(err, store.ErrUnavailable):
		return nil, status.Error(codes.Unavailable, "database unavailable")
	case err != nil:
		return nil, status.Error(codes.Internal, "internal error")
	}
	return a.Username, nil
}

// caller is the caller of a call: the test's callers ride in the context.
type callerKey struct{}

func withCaller(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, callerKey{}, id)
}

func callerOf(ctx context.Context) string {
	id, _ := ctx.Value(callerKey{}).(string)
	return id
}

// reads returns sheba_db_reads_total by "target/reason", the series that
// are not 0.
func reads(t *testing.T, m *standby.Metrics) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if v := s.GetCounter().GetValue(); v != 0 {
				out[labels["target"]+"/"+labels["reason"]] = v
			}
		}
	}
	return out
}

func call(ctx context.Context, i grpc.UnaryServerInterceptor, method string, req any, h grpc.UnaryHandler) (any, error) {
	return i(ctx, req, &grpc.UnaryServerInfo{FullMethod: method}, h)
}

// TestRouting checks where each read runs, and how it is counted, on a
// standby that answers.
func TestRouting(t *testing.T) {
	t.Parallel()
	for _, test := range []struct {
		name      string
		id        string
		wantResp  any
		wantCode  codes.Code
		wantReads map[string]float64
	}{
		{"found on the standby", bothID, "on-standby", codes.OK, map[string]float64{"standby/ok": 1}},
		{"found on the primary alone", primaryID, "primary-only", codes.OK, map[string]float64{"primary/not_found_fallback": 1}},
		{"found nowhere", unknownID, nil, codes.NotFound, map[string]float64{"primary/not_found_fallback": 1}},
	} {
		t.Run(test.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			m := standby.NewMetrics()
			i := standby.UnaryServerInterceptor(e.standby, methods, callerOf, standby.WithMetrics(m))
			resp, err := call(withCaller(t.Context(), "k"), i, readMethod, test.id, e.getAccount)
			if resp != test.wantResp || status.Code(err) != test.wantCode {
				t.Errorf("got %v, %v; want %v, %v", resp, err, test.wantResp, test.wantCode)
			}
			if diff := cmp.Diff(test.wantReads, reads(t, m)); diff != "" {
				t.Errorf("sheba_db_reads_total (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNotRouted checks that a call of another method runs as it came,
// without a standby connection, and is not counted.
func TestNotRouted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := standby.NewMetrics()
	i := standby.UnaryServerInterceptor(e.standby, methods, callerOf, standby.WithMetrics(m))
	for _, method := range []string{writeMethod, otherMethod} {
		resp, err := call(t.Context(), i, method, bothID, e.getAccount)
		if resp != "on-primary" || err != nil {
			t.Errorf("%s: got %v, %v; want on-primary", method, resp, err)
		}
	}
	if got := reads(t, m); len(got) != 0 {
		t.Errorf("sheba_db_reads_total: got %v, want none", got)
	}
}

// TestRecentWrite checks that a caller's reads go to the primary for the
// lag bound after its write ends, whatever the write's outcome, and the
// other callers' reads do not.
func TestRecentWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := standby.NewMetrics()
	var clock atomic.Int64
	now := func() time.Duration { return time.Duration(clock.Load()) }
	i := standby.UnaryServerInterceptor(e.standby, methods, callerOf, standby.WithMetrics(m),
		standby.WithMaxLag(time.Second), standby.WithCallers("k", "other"), standby.WithClock(now))
	read := func(caller string) any {
		resp, err := call(withCaller(t.Context(), caller), i, readMethod, bothID, e.getAccount)
		if err != nil {
			t.Fatalf("read as %q: %v", caller, err)
		}
		return resp
	}
	clock.Store(int64(time.Hour))
	// A write cut by its deadline may have committed.
	_, err := call(withCaller(t.Context(), "k"), i, writeMethod, nil, func(context.Context, any) (any, error) {
		clock.Add(int64(100 * time.Millisecond)) // it ends later than it began
		return nil, status.Error(codes.DeadlineExceeded, "deadline exceeded")
	})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("write: got %v", err)
	}
	clock.Add(int64(999 * time.Millisecond))
	if got := read("k"); got != "on-primary" {
		t.Errorf("the writer's read %v after its write: got %v, want on-primary", 999*time.Millisecond, got)
	}
	if got := read("other"); got != "on-standby" {
		t.Errorf("another caller's read: got %v, want on-standby", got)
	}
	if got := read("unknown"); got != "on-standby" {
		t.Errorf("an unknown caller's read: got %v, want on-standby", got)
	}
	clock.Add(int64(time.Millisecond))
	if got := read("k"); got != "on-standby" {
		t.Errorf("the writer's read 1s after its write: got %v, want on-standby", got)
	}
	want := map[string]float64{"primary/recent_write": 1, "standby/ok": 3}
	if diff := cmp.Diff(want, reads(t, m)); diff != "" {
		t.Errorf("sheba_db_reads_total (-want +got):\n%s", diff)
	}
}

// TestStandbyDown checks that reads run on the primary when no standby
// connection can be made (the first call tries, the second finds it left
// alone for a second, store.TestStandbyDown).
func TestStandbyDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Port 1 on 127.0.0.1 refuses connections.
	down := openStandby(t, "postgres://sheba@127.0.0.1:1/sheba?connect_timeout=1")
	m := standby.NewMetrics()
	i := standby.UnaryServerInterceptor(down, methods, callerOf, standby.WithMetrics(m))
	for range 2 {
		resp, err := call(t.Context(), i, readMethod, bothID, e.getAccount)
		if resp != "on-primary" || err != nil {
			t.Errorf("got %v, %v; want on-primary", resp, err)
		}
	}
	if diff := cmp.Diff(map[string]float64{"primary/standby_down": 2}, reads(t, m)); diff != "" {
		t.Errorf("sheba_db_reads_total (-want +got):\n%s", diff)
	}
}

// TestStandbyFailsTheCall checks that a call whose standby connection
// breaks under it runs again on the primary.
func TestStandbyFailsTheCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := standby.NewMetrics()
	i := standby.UnaryServerInterceptor(e.standby, methods, callerOf, standby.WithMetrics(m))
	runs := 0
	resp, err := call(t.Context(), i, readMethod, bothID, func(ctx context.Context, req any) (any, error) {
		if runs++; runs == 1 {
			// The standby's connections end under the call.
			if _, err := e.admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, e.standbyName); err != nil {
				t.Fatal(err)
			}
		}
		return e.getAccount(ctx, req)
	})
	if resp != "on-primary" || err != nil {
		t.Errorf("got %v, %v; want on-primary", resp, err)
	}
	if diff := cmp.Diff(map[string]float64{"primary/standby_down": 1}, reads(t, m)); diff != "" {
		t.Errorf("sheba_db_reads_total (-want +got):\n%s", diff)
	}
}

// TestServer runs the interceptor in a real gRPC server: Ping, made a
// read-only method, reads the standby.
func TestServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ping := shebav1.PingService_Ping_FullMethodName
	i := standby.UnaryServerInterceptor(e.standby, standby.Methods{ReadOnly: map[string]bool{ping: true}}, callerOf)
	client := interceptortest.Serve(t, i, func(ctx context.Context) (*shebav1.PingResponse, error) {
		resp, err := e.getAccount(ctx, bothID)
		if err != nil {
			return nil, err
		}
		return &shebav1.PingResponse{Message: resp.(string)}, nil
	})
	resp, err := client.Ping(t.Context(), &shebav1.PingRequest{})
	if err != nil || resp.GetMessage() != "on-standby" {
		t.Errorf("got %v, %v; want on-standby", resp, err)
	}
}

// TestPrimaryDown checks that while the primary is down the standby still
// answers, and what is for the primary answers at once.
func TestPrimaryDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	down := status.Error(codes.Unavailable, "database unavailable")
	m := standby.NewMetrics()
	i := standby.UnaryServerInterceptor(e.standby, methods, callerOf, standby.WithMetrics(m),
		standby.WithPrimaryDown(func() bool { return false }, down))
	if resp, err := call(t.Context(), i, readMethod, bothID, e.getAccount); resp != "on-standby" || err != nil {
		t.Errorf("found on the standby: got %v, %v; want on-standby", resp, err)
	}
	if _, err := call(t.Context(), i, readMethod, primaryID, e.getAccount); err != down {
		t.Errorf("not found on the standby: got %v, want %v", err, down)
	}
	want := map[string]float64{"standby/ok": 1, "primary/not_found_fallback": 1}
	if diff := cmp.Diff(want, reads(t, m)); diff != "" {
		t.Errorf("sheba_db_reads_total (-want +got):\n%s", diff)
	}
}
