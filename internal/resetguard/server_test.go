package resetguard_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/shebasvc/sheba/internal/resetguard"
	"github.com/shebasvc/sheba/internal/resetguard/resettest"
)

const budget = 100

// guarded is a listener whose connections the guard watches.
type guarded struct {
	net.Listener
	g *resetguard.Guard
}

func (l guarded) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.g.Conn(c), nil
}

// TestGRPC runs a rapid-reset client against a grpc-go server whose
// connections the guard watches: the connection is closed after about the
// budget, and counted once; a client that cancels a third of its calls is
// not cut.
func TestGRPC(t *testing.T) {
	var ended atomic.Int64
	g := resetguard.New(budget, func(net.Addr) { ended.Add(1) })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(guarded{lis, g}) }()
	defer srv.Stop()
	addr := lis.Addr().String()

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	r, err := resettest.Attack(c, resettest.GRPCFields(addr, "/grpc.health.v1.Health/Check"), false, 100_000, 10*time.Second)
	t.Logf("attack: %v (err %v)", r, err)
	if err != nil || !r.Closed || r.Pairs > budget+100 {
		t.Errorf("got %v, want the connection closed within %d pairs", r, budget+100)
	}
	if got := ended.Load(); got != 1 {
		t.Errorf("connections ended: got %d, want 1", got)
	}

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	if failed := resettest.CancellingClient(600, 8, func(ctx context.Context) error {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}); failed > 0 {
		t.Errorf("%d calls of the client that cancels a third failed", failed)
	}
	if got := ended.Load(); got != 1 {
		t.Errorf("connections ended after the normal client: got %d, want 1", got)
	}
}

// TestHandler runs a rapid-reset client against net/http's HTTP/2 server
// over TLS with the guard's ConnContext and Handler: GOAWAY comes after
// about the budget, counted once; a client that cancels a third of its
// requests is not cut.
func TestHandler(t *testing.T) {
	var ended atomic.Int64
	g := resetguard.New(budget, func(net.Addr) { ended.Add(1) })
	s := httptest.NewUnstartedServer(g.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A handler that takes a moment, as sheba's do: one that is done
		// before net/http reads the stream's reset is a completed request
		// (net/http does not tell a handler of a reset that comes after
		// it), which under -race an empty handler often was.
		select {
		case <-r.Context().Done():
			return
		case <-time.After(2 * time.Millisecond):
		}
		_, _ = io.WriteString(w, "pong")
	})))
	s.EnableHTTP2 = true
	s.Config.ConnContext = g.ConnContext
	s.StartTLS()
	defer s.Close()
	addr := s.Listener.Addr().String()

	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := resettest.Attack(c, resettest.GetFields(addr, "/ping"), true, 100_000, 10*time.Second)
	t.Logf("attack: %v (err %v)", r, err)
	// The handlers count as they end, after their stream was read.
	const bound = 20 * budget
	if err != nil || !r.GoAway || r.Pairs > bound {
		t.Errorf("got %v, want GOAWAY within %d pairs", r, bound)
	}
	if got := ended.Load(); got != 1 {
		t.Errorf("connections ended: got %d, want 1", got)
	}

	client := s.Client()
	if failed := resettest.CancellingClient(600, 8, func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/ping", nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		return err
	}); failed > 0 {
		t.Errorf("%d requests of the client that cancels a third failed", failed)
	}
	if got := ended.Load(); got != 1 {
		t.Errorf("connections ended after the normal client: got %d, want 1", got)
	}
}
