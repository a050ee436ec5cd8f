package e2e

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/internal/app"
)

// Health and lifecycle (docs/operations.md).

// tcpProxy forwards TCP connections from a local port to a target; cut
// makes the target look down (open connections die, new ones are refused)
// until restore listens again on the same port, and setLatency delays
// every byte each way. It is safe for concurrent use.
type tcpProxy struct {
	target string
	addr   string // the proxy's own host:port, the same across cuts

	latency atomic.Int64 // nanoseconds each way

	mu    sync.Mutex
	lis   net.Listener // nil while cut
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	p := &tcpProxy{target: target, conns: map[net.Conn]struct{}{}}
	lis := listen(t)
	p.addr = lis.Addr().String()
	p.start(lis)
	t.Cleanup(func() {
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *tcpProxy) start(lis net.Listener) {
	p.mu.Lock()
	p.lis = lis
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return // closed by cut
			}
			p.wg.Go(func() { p.forward(lis, c) })
		}
	})
}

func (p *tcpProxy) forward(lis net.Listener, c net.Conn) {
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.lis != lis {
		// Cut while dialing.
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()

	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			c.Close()
			up.Close()
			p.mu.Lock()
			delete(p.conns, c)
			delete(p.conns, up)
			p.mu.Unlock()
		})
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.copy(up, c); closeBoth() })
	wg.Go(func() { p.copy(c, up); closeBoth() })
	wg.Wait()
}

// setLatency delays every byte by d in each direction, from now on.
func (p *tcpProxy) setLatency(d time.Duration) { p.latency.Store(int64(d)) }

// copy copies src to dst, each chunk held until the latency has passed
// since it was read; chunks read meanwhile queue behind it, so the delay
// does not cut the throughput, as on a long link. When src ends, what is
// still held is dropped: the connection is being closed.
func (p *tcpProxy) copy(dst io.Writer, src io.Reader) {
	type chunk struct {
		data []byte
		due  time.Time
	}
	queue := make(chan chunk, 1024)
	ended := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			var c chunk
			select {
			case c = <-queue:
			case <-ended:
				return
			}
			select {
			case <-time.After(time.Until(c.due)):
			case <-ended:
				return
			}
			if _, err := dst.Write(c.data); err != nil {
				return
			}
		}
	}()
	defer func() {
		close(ended)
		<-done
	}()
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case queue <- chunk{data: buf[:n], due: time.Now().Add(time.Duration(p.latency.Load()))}:
			case <-done:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// cut closes the listener and every open connection: the database is gone.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lis != nil {
		p.lis.Close()
		p.lis = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// restore listens again on the same port: the database is back.
func (p *tcpProxy) restore(t *testing.T) {
	t.Helper()
	var err error
	for range 50 {
		var lis net.Listener
		if lis, err = net.Listen("tcp", p.addr); err == nil {
			p.start(lis)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("proxy: listen again on %s: %v", p.addr, err)
}

// viaProxy starts a proxy to the database of a test database URL and
// returns the URL rewritten to go through it, and the proxy.
func viaProxy(t *testing.T) (func(string) string, **tcpProxy) {
	t.Helper()
	var p *tcpProxy
	return func(raw string) string {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("test database URL: %v", err)
		}
		p = newTCPProxy(t, u.Host)
		u.Host = p.addr
		return u.String()
	}, &p
}

// healthOf returns the gRPC health of service, or the error.
func (e *testEnv) healthOf(ctx context.Context, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	resp, err := e.health.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	return resp.GetStatus(), err
}

// readiness is what /readyz and gRPC health say at one moment.
type readiness struct {
	readyz     int
	reason     string
	root, acct healthpb.HealthCheckResponse_ServingStatus
}

func (e *testEnv) readiness(t *testing.T) readiness {
	t.Helper()
	var rd readiness
	r := e.do(t, http.MethodGet, "/readyz", "")
	rd.readyz = r.Code
	if r.Code != http.StatusOK {
		body := r.JSON(t)
		if body["status"] != "unavailable" {
			t.Errorf("/readyz %d body %s: want status unavailable", r.Code, r.Body)
		}
		rd.reason, _ = body["reason"].(string)
	}
	var err error
	if rd.root, err = e.healthOf(t.Context(), ""); err != nil {
		t.Fatalf("health Check(\"\"): %v", err)
	}
	if rd.acct, err = e.healthOf(t.Context(), "sheba.v1.AccountService"); err != nil {
		t.Fatalf("health Check(AccountService): %v", err)
	}
	return rd
}

func (rd readiness) ready() bool {
	return rd.readyz == http.StatusOK && rd.root == healthpb.HealthCheckResponse_SERVING && rd.acct == healthpb.HealthCheckResponse_SERVING
}

func (rd readiness) notReady() bool {
	return rd.readyz == http.StatusServiceUnavailable && rd.reason != "" &&
		rd.root == healthpb.HealthCheckResponse_NOT_SERVING && rd.acct == healthpb.HealthCheckResponse_NOT_SERVING
}

// waitFor polls until cond holds or d passes, and returns how long it took.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// TestDatabaseOutage cuts the database away under a running server:
// readiness and gRPC health turn NOT_SERVING within two check intervals,
// business calls fail fast with UNAVAILABLE while Ping answers, and once the
// database is back everything recovers by itself.
func TestDatabaseOutage(t *testing.T) {
	t.Parallel()
	const interval = 500 * time.Millisecond
	rewrite, proxy := viaProxy(t)
	e := startTestEnv(t, envSetup{
		opts:    []app.Option{app.WithHealthInterval(interval)},
		poolURL: rewrite,
	})
	waitFor(t, 10*time.Second, "ready at start", func() bool { return e.readiness(t).ready() })
	id := e.newAccount(t, "outage")

	// Watch from now on; the first message is the current status.
	watchCtx, stopWatch := context.WithCancel(t.Context())
	defer stopWatch()
	watch, err := e.health.Watch(watchCtx, &healthpb.HealthCheckRequest{Service: "sheba.v1.AccountService"})
	if err != nil {
		t.Fatalf("health Watch: %v", err)
	}
	seen := make(chan healthpb.HealthCheckResponse_ServingStatus, 16)
	go func() {
		defer close(seen)
		for {
			resp, err := watch.Recv()
			if err != nil {
				return
			}
			seen <- resp.GetStatus()
		}
	}()
	var watched []healthpb.HealthCheckResponse_ServingStatus
	next := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		select {
		case s := <-seen:
			watched = append(watched, s)
			if s != want {
				t.Fatalf("Watch: got %v after %v, want %v", s, watched[:len(watched)-1], want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Watch: nothing after %v within 5 s, want %v", watched, want)
		}
	}
	next(healthpb.HealthCheckResponse_SERVING)

	(*proxy).cut()
	limit := 2*interval + 1500*time.Millisecond
	took := waitFor(t, limit, "/readyz 503 and NOT_SERVING after the cut", func() bool { return e.readiness(t).notReady() })
	t.Logf("not ready %v after the cut (check interval %v, bound %v)", took, interval, limit)
	next(healthpb.HealthCheckResponse_NOT_SERVING)

	start := time.Now()
	_, err = e.account.GetAccount(t.Context(), &shebav1.GetAccountRequest{AccountId: id})
	grpcTook := time.Since(start)
	wantGRPCError(t, err, codes.Unavailable, "")
	start = time.Now()
	r := e.do(t, http.MethodGet, "/v1/accounts/"+id, "")
	restTook := time.Since(start)
	wantRESTError(t, r, http.StatusServiceUnavailable, codes.Unavailable, "")
	t.Logf("GetAccount while down: gRPC %v, REST %v (limits.timeout 5s)", grpcTook, restTook)
	if grpcTook > 2*time.Second || restTook > 2*time.Second {
		t.Errorf("GetAccount while down took gRPC %v, REST %v; want under 2 s", grpcTook, restTook)
	}
	if _, err := e.ping.Ping(t.Context(), &shebav1.PingRequest{}); err != nil {
		t.Errorf("gRPC Ping while the database is down: %v", err)
	}
	wantCode(t, e.do(t, http.MethodGet, "/v1/ping", ""), http.StatusOK)
	if r := e.do(t, http.MethodGet, "/livez", ""); r.Code != http.StatusNoContent {
		t.Errorf("/livez while the database is down: got %d, want 204", r.Code)
	}

	(*proxy).restore(t)
	took = waitFor(t, 10*time.Second, "ready again after restore", func() bool { return e.readiness(t).ready() })
	t.Logf("ready %v after the database came back", took)
	next(healthpb.HealthCheckResponse_SERVING)
	if diff := cmp.Diff([]healthpb.HealthCheckResponse_ServingStatus{
		healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING, healthpb.HealthCheckResponse_SERVING,
	}, watched); diff != "" {
		t.Errorf("Watch (-want +got):\n%s", diff)
	}

	got, err := e.account.GetAccount(t.Context(), &shebav1.GetAccountRequest{AccountId: id})
	if err != nil || got.GetAccount().GetUsername() != "outage" {
		t.Errorf("gRPC GetAccount after the outage: got %v, %v", got, err)
	}
	r = e.do(t, http.MethodGet, "/v1/accounts/"+id, "")
	wantCode(t, r, http.StatusOK)
	if r.JSON(t)["username"] != "outage" {
		t.Errorf("REST GetAccount after the outage: got %s", r.Body)
	}
}

// TestShutdownUnderLoad cancels the Serve context, as SIGTERM does in
// cmd/sheba, with 50 slow calls in flight (gRPC, Connect and REST): readiness turns 503 during the
// drain delay, every call completes with its normal answer, the listeners
// then refuse connections, and Serve returns nil (exit status 0).
func TestShutdownUnderLoad(t *testing.T) {
	t.Parallel()
	const (
		n          = 50
		slow       = time.Second
		drainDelay = 300 * time.Millisecond
	)
	g := &gauge{}
	e := newTestEnvWith(t, nil, []app.Option{slowHook(g, slow)}, func(c *config.Config) {
		c.Shutdown.DrainDelay = drainDelay
	})
	waitReady(t, e)
	id := e.newAccount(t, "steady")

	// Requests go out on fresh connections of their own, so that the
	// client's connection pool does not hide what the server does.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	restGet := func(path string) (int, error) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, e.baseURL+path, nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("X-Api-Key", testKey)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, err
	}

	// Connect calls run on a grpc.Server of their own through its
	// ServeHTTP, which a GracefulStop would cut.
	connectGet := connect.NewClient[shebav1.GetAccountRequest, shebav1.GetAccountResponse](client,
		e.baseURL+"/sheba.v1.AccountService/GetAccount", connect.WithProtoJSON())

	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			switch i % 3 {
			case 0:
				got, err := e.account.GetAccount(t.Context(), &shebav1.GetAccountRequest{AccountId: id})
				if err == nil && got.GetAccount().GetUsername() != "steady" {
					err = errors.New("wrong account: " + got.String())
				}
				errs[i] = err
				return
			case 1:
				req := connect.NewRequest(&shebav1.GetAccountRequest{AccountId: id})
				req.Header().Set("X-Api-Key", testKey)
				got, err := connectGet.CallUnary(t.Context(), req)
				if err == nil && got.Msg.GetAccount().GetUsername() != "steady" {
					err = errors.New("Connect: wrong account: " + got.Msg.String())
				}
				errs[i] = err
				return
			}
			code, err := restGet("/v1/accounts/" + id)
			if err == nil && code != http.StatusOK {
				err = errors.New("REST: " + http.StatusText(code))
			}
			errs[i] = err
		})
	}
	waitFor(t, 10*time.Second, "50 calls in the handler", func() bool { return g.inside.Load() == n })

	start := time.Now()
	served := make(chan error, 1)
	go func() { served <- e.stop() }()

	// During the drain delay the listeners still accept, and say not ready.
	var readyz int
	var health healthpb.HealthCheckResponse_ServingStatus
	waitFor(t, drainDelay, "/readyz 503 and NOT_SERVING in the drain delay", func() bool {
		code, err := restGet("/readyz")
		if err != nil {
			t.Fatalf("GET /readyz during the drain delay: %v", err)
		}
		readyz = code
		if health, err = e.healthOf(t.Context(), ""); err != nil {
			t.Fatalf("health Check during the drain delay: %v", err)
		}
		return readyz == http.StatusServiceUnavailable && health == healthpb.HealthCheckResponse_NOT_SERVING
	})
	t.Logf("not ready %v after the stop", time.Since(start))
	if inside := g.inside.Load(); inside != n {
		t.Errorf("%d calls in the handler during the drain delay, want %d", inside, n)
	}

	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("call %d failed across the shutdown: %v", i, err)
		}
	}
	select {
	case err := <-served:
		t.Logf("Serve returned %v after the stop", time.Since(start))
		if err != nil {
			t.Errorf("Serve: got %v, want nil (exit status 0)", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return within 5 s of the last call")
	}

	for name, addr := range map[string]string{"gRPC": e.grpcAddr, "HTTP": e.httpAddr} {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			t.Errorf("%s listener %s: connection accepted after Serve returned", name, addr)
			continue
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s listener %s: got %v, want connection refused", name, addr, err)
		}
	}
	if _, err := e.ping.Ping(t.Context(), &shebav1.PingRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("gRPC Ping after shutdown: got %v, want Unavailable", err)
	}
}
