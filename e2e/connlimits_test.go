package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"golang.org/x/net/http2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/e2e/resttest"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/internal/app"
	"github.com/shebasvc/sheba/internal/certreload/certtest"
	"github.com/shebasvc/sheba/internal/resetguard/resettest"
)

// Connections and streams are bounded without a key
// (docs/operations.md#connections-and-streams).

// tlsTestEnv is a testEnv serving TLS on both business listeners, with
// operator.addr set (its plaintext /metrics): ca signed the certificate,
// serial 10, whose files (tls.crt, tls.key) are in vol.
func tlsTestEnv(t *testing.T, opts ...app.Option) (e *testEnv, ca *certtest.Authority, vol *certtest.Volume) {
	t.Helper()
	ca = certtest.NewAuthority(t, "test CA")
	cert, key := ca.Issue(t, 10, false)
	vol = certtest.NewVolume(t, map[string][]byte{"tls.crt": cert, "tls.key": key})
	return newTestEnvWith(t, nil, opts, func(c *config.Config) {
		c.TLS = config.TLS{CertFile: vol.Path("tls.crt"), KeyFile: vol.Path("tls.key")}
		c.Operator.Addr = "127.0.0.1:0"
	}), ca, vol
}

// openWatch opens a health Watch stream and reads its first answer: nil
// when the stream is open.
func openWatch(ctx context.Context, h healthpb.HealthClient) error {
	w, err := h.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	return err
}

// openReflection opens a server-reflection stream and makes one request
// on it: nil when the stream is open.
func openReflection(ctx context.Context, conn grpc.ClientConnInterface) error {
	s, err := rpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return err
	}
	if err := s.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}); err != nil && err != io.EOF {
		return err
	}
	_, err = s.Recv()
	return err
}

// tooManyStreams says what is wrong with err as the refusal of a stream
// over grpc.max_open_streams ("" when it is one): RESOURCE_EXHAUSTED with
// exactly one ErrorInfo, of reason TOO_MANY_STREAMS, and a RetryInfo.
func tooManyStreams(err error) string {
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		return fmt.Sprintf("got %v, want ResourceExhausted", err)
	}
	if infos := resttest.ErrorInfos(st); !slices.Equal(infos, []string{reason.Domain + "/" + reason.TooManyStreams}) {
		return fmt.Sprintf("ErrorInfo %v, want the one %s/%s", infos, reason.Domain, reason.TooManyStreams)
	}
	retries := 0
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.RetryInfo); ok {
			retries++
		}
	}
	if retries != 1 {
		return fmt.Sprintf("%d RetryInfo, want one", retries)
	}
	return ""
}

// TestKeylessStreamsBounded opens 40 connections of 256 health Watch
// streams each (grpc.max_concurrent_streams) without a key, against sheba
// run as a process with the default grpc.max_open_streams of 1024: exactly
// 1024 open, every other is refused RESOURCE_EXHAUSTED TOO_MANY_STREAMS,
// the server's goroutines stay bounded, a reflection stream is refused
// too; once they are closed, 1024 streams, a reflection stream among them,
// open again and no more.
func TestKeylessStreamsBounded(t *testing.T) {
	const (
		conns    = 40
		perConn  = 256  // grpc.max_concurrent_streams
		maxOpen  = 1024 // grpc.max_open_streams
		attempts = conns * perConn
	)
	p := startSheba(t, "SHEBA_GRPC_REFLECTION=true")
	goroutines := func() float64 { return series(scrapeAt(t, "http://"+p.HTTPAddr), "go_goroutines")[""] }
	base := goroutines()
	dial := func() *grpc.ClientConn {
		cc, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}

	// A stream that hangs fails the test rather than hold it.
	bounded, stop := context.WithTimeout(t.Context(), 2*time.Minute)
	defer stop()
	ctx, cancel := context.WithCancel(bounded)
	defer cancel()
	var (
		opened, refused atomic.Int64
		wrong           sync.Map
		wg              sync.WaitGroup
	)
	for range conns {
		health := healthpb.NewHealthClient(dial())
		for range perConn {
			wg.Go(func() {
				if err := openWatch(ctx, health); err != nil {
					refused.Add(1)
					if msg := tooManyStreams(err); msg != "" {
						wrong.Store(msg, true)
					}
					return
				}
				opened.Add(1)
			})
		}
	}
	wg.Wait()
	wrong.Range(func(msg, _ any) bool { t.Errorf("a refused Watch: %s", msg); return true })
	t.Logf("%d Watch streams: %d open, %d refused", attempts, opened.Load(), refused.Load())
	if opened.Load() != maxOpen || refused.Load() != attempts-maxOpen {
		t.Errorf("got %d open and %d refused, want %d and %d", opened.Load(), refused.Load(), maxOpen, attempts-maxOpen)
	}
	// A stream costs about two goroutines (grpc-go's, the drain's); the
	// bound leaves room for the refused ones on their way out.
	bound := base + 4*maxOpen
	var now float64
	waitFor(t, 10*time.Second, fmt.Sprintf("at most %v goroutines in the server", bound), func() bool {
		now = goroutines()
		return now <= bound
	})
	t.Logf("server goroutines: %v before, %v with the streams open", base, now)
	// On a connection of its own: each of the others carries all the
	// streams it may.
	if msg := tooManyStreams(openReflection(ctx, dial())); msg != "" {
		t.Errorf("a reflection stream with %d Watch streams open: %s", maxOpen, msg)
	}

	// Closed, they give their places back: 1024 streams open again, a
	// reflection stream counting as one of them.
	cancel()
	ctx, cancel = context.WithCancel(bounded)
	defer cancel()
	fresh := make([]healthpb.HealthClient, 5)
	for i := range fresh {
		fresh[i] = healthpb.NewHealthClient(dial())
	}
	// The server frees a place when it has read the client's reset: what
	// is refused meanwhile is tried again.
	deadline := time.Now().Add(30 * time.Second)
	retry := func(open func() error) error {
		for {
			err := open()
			if err == nil || tooManyStreams(err) != "" || time.Now().After(deadline) {
				return err
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	reflConn := dial()
	if err := retry(func() error { return openReflection(ctx, reflConn) }); err != nil {
		t.Fatalf("a reflection stream after the others closed: %v", err)
	}
	var failed atomic.Int64
	for i := range maxOpen - 1 {
		wg.Go(func() {
			if err := retry(func() error { return openWatch(ctx, fresh[i%len(fresh)]) }); err != nil {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Errorf("%d of %d Watch streams beside the reflection stream did not open", failed.Load(), maxOpen-1)
	}
	if msg := tooManyStreams(openWatch(ctx, healthpb.NewHealthClient(dial()))); msg != "" {
		t.Errorf("a Watch beyond a reflection stream and %d Watches: %s", maxOpen-1, msg)
	}
}

// TestOperatorStreamsBounded: the operator port's health Watch streams
// (plaintext HTTP/2, no key) are bounded by grpc.max_open_streams too, with
// a count of their own: with a bound of 3, a fourth Watch there is refused
// RESOURCE_EXHAUSTED TOO_MANY_STREAMS, while grpc.addr still opens 3.
func TestOperatorStreamsBounded(t *testing.T) {
	t.Parallel()
	const maxOpen = 3
	e := newTestEnv(t, func(c *config.Config) {
		c.GRPC.MaxOpenStreams = maxOpen
		c.Operator.Addr = "127.0.0.1:0"
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, port := range []struct{ name, addr string }{{"operator", e.operatorAddr}, {"grpc", e.grpcAddr}} {
		cc, err := grpc.NewClient(port.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		health := healthpb.NewHealthClient(cc)
		for i := range maxOpen {
			if err := openWatch(ctx, health); err != nil {
				t.Fatalf("%s: Watch %d of %d: %v", port.name, i+1, maxOpen, err)
			}
		}
		if port.name == "operator" {
			if msg := tooManyStreams(openWatch(ctx, health)); msg != "" {
				t.Errorf("%s: Watch %d: %s", port.name, maxOpen+1, msg)
			}
		}
	}
}

// TestReflectionOffByDefault: the reflection service is UNIMPLEMENTED
// unless grpc.reflection is true.
func TestReflectionOffByDefault(t *testing.T) {
	t.Parallel()
	off := newTestEnv(t)
	if err := openReflection(t.Context(), off.anon); status.Code(err) != codes.Unimplemented {
		t.Errorf("reflection by default: got %v, want Unimplemented", err)
	}
	on := newTestEnv(t, func(c *config.Config) { c.GRPC.Reflection = true })
	if err := openReflection(t.Context(), on.anon); err != nil {
		t.Errorf("reflection with grpc.reflection true: %v", err)
	}
}

// resetsClosed is sheba_connections_closed_total{reason="stream_resets"}
// of listener in families.
func resetsClosed(families map[string]*dto.MetricFamily, listener string) float64 {
	return series(families, "sheba_connections_closed_total", "reason", "listener")["reason=stream_resets,listener="+listener]
}

// TestRapidResetGRPC: a client that opens and resets streams on
// grpc.addr, with an x/net/http2 Framer, has its connection closed
// within 4 × grpc.max_concurrent_streams pairs and a batch (the audit's
// client sent 729,000 in 10 s without it), counted once; a client that
// cancels a third of its calls is not cut.
func TestRapidResetGRPC(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	// Health needs no key and runs a handler for each stream; a keyed
	// method called without a key is refused in the tap, its stream ended
	// before the client's reset is read, which must not count as a
	// completed call.
	methods := []string{"/grpc.health.v1.Health/Check", shebav1.AccountService_GetAccount_FullMethodName}
	for _, method := range methods {
		c, err := net.Dial("tcp", e.grpcAddr)
		if err != nil {
			t.Fatal(err)
		}
		r, err := resettest.Attack(c, resettest.GRPCFields(e.grpcAddr, method), false, 200_000, 10*time.Second)
		t.Logf("rapid reset of %s on grpc.addr: %v", method, r)
		const bound = 4*256 + 200
		if err != nil || !r.Closed || r.Pairs > bound {
			t.Errorf("%s: got %v (%v), want the connection closed within %d pairs", method, r, err, bound)
		}
	}
	if got := resetsClosed(e.scrape(t), "grpc"); got != float64(len(methods)) {
		t.Errorf("sheba_connections_closed_total{reason=stream_resets,listener=grpc}: got %v, want %d", got, len(methods))
	}

	// A call that reads the database, so that cancellations find it
	// running.
	if failed := resettest.CancellingClient(1500, 16, func(ctx context.Context) error {
		_, err := e.sub.ListSubscriptions(ctx, &shebav1.ListSubscriptionsRequest{PageSize: 1})
		return err
	}); failed > 0 {
		t.Errorf("%d calls that were not cancelled failed", failed)
	}
	if got := resetsClosed(e.scrape(t), "grpc"); got != float64(len(methods)) {
		t.Errorf("connections closed after the client that cancels a third of its calls: got %v, want still %d", got, len(methods))
	}
}

// TestRapidResetHTTP: a client that opens and resets streams on http.addr
// over TLS and HTTP/2 (where net/http's own guard sent GOAWAY after about
// 278,000 pairs, or never in 10 s) is sent GOAWAY within a few budgets of
// 1000 pairs, counted once; a client that cancels a third of its requests
// is not cut.
func TestRapidResetHTTP(t *testing.T) {
	t.Parallel()
	// Ping takes a moment, as a call that reads the database does: net/http
	// drops a reset it reads after the stream's handler has returned (that
	// stream cost a whole request, as any does), and under -race on a busy
	// machine an instant Ping was often done before its reset was read.
	slowPing := withHandlerHook(func(ctx context.Context, method string) error {
		if method == shebav1.PingService_Ping_FullMethodName {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
		return nil
	})
	e, ca, _ := tlsTestEnv(t, slowPing)
	tlsConfig := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", NextProtos: []string{"h2"}}
	c, err := tls.Dial("tcp", e.httpAddr, tlsConfig)
	if err != nil {
		t.Fatal(err)
	}
	r, err := resettest.Attack(c, resettest.GetFields(e.httpAddr, "/v1/ping"), true, 200_000, 10*time.Second)
	t.Logf("rapid reset on http.addr: %v", r)
	// The budget is 4 × 250 streams; handlers count as they end, up to 250
	// of them running and 1000 queued behind the frames read.
	const bound = 5000
	if err != nil || !r.GoAway || r.Pairs > bound {
		t.Errorf("got %v (%v), want GOAWAY within %d pairs", r, err, bound)
	}
	op := "http://" + e.operatorAddr
	if got := resetsClosed(scrapeAt(t, op), "http"); got != 1 {
		t.Errorf("sheba_connections_closed_total{reason=stream_resets,listener=http}: got %v, want 1", got)
	}

	tr := &http.Transport{TLSClientConfig: tlsConfig, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	if failed := resettest.CancellingClient(1500, 16, func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+e.httpAddr+"/v1/subscriptions?pageSize=1", nil)
		req.Header.Set("X-Api-Key", testKey)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.ReadAll(resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
			return fmt.Errorf("%s over HTTP/%d", resp.Status, resp.ProtoMajor)
		}
		return nil
	}); failed > 0 {
		t.Errorf("%d requests that were not cancelled failed", failed)
	}
	if got := resetsClosed(scrapeAt(t, op), "http"); got != 1 {
		t.Errorf("connections closed after the client that cancels a third of its requests: got %v, want still 1", got)
	}
}

// TestSilentConnections: a connection to grpc.addr that sends nothing is
// closed after about 10 s (it was held 120 s); one that sent its preface
// and makes no call is sent GOAWAY after grpc.max_connection_idle (1 s
// here), then closed.
func TestSilentConnections(t *testing.T) {
	t.Parallel()
	t.Run("silent", func(t *testing.T) {
		t.Parallel()
		e := newTestEnv(t)
		c, err := net.Dial("tcp", e.grpcAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		_ = c.SetReadDeadline(start.Add(30 * time.Second))
		_, err = io.Copy(io.Discard, c)
		took := time.Since(start)
		t.Logf("a silent connection was held %v", took.Round(100*time.Millisecond))
		if err != nil || took > 20*time.Second {
			t.Errorf("a silent connection: %v after %v, want closed within about 10 s", err, took)
		}
	})
	t.Run("idle", func(t *testing.T) {
		t.Parallel()
		const idle = time.Second
		e := newTestEnv(t, func(c *config.Config) { c.GRPC.MaxConnectionIdle = idle })
		c, err := net.Dial("tcp", e.grpcAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		_ = c.SetDeadline(start.Add(20 * time.Second))
		fr := http2.NewFramer(c, c)
		if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteSettings(); err != nil {
			t.Fatal(err)
		}
		var goAway time.Duration
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				if goAway == 0 || !errors.Is(err, io.EOF) {
					t.Fatalf("after %v: %v; GOAWAY after %v, want GOAWAY after about %v, then the connection closed", time.Since(start), err, goAway, idle)
				}
				break
			}
			// Answered as a client does, so that the server's GOAWAY
			// ping finds it there.
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = fr.WriteSettingsAck()
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					_ = fr.WritePing(true, f.Data)
				}
			case *http2.GoAwayFrame:
				if goAway == 0 {
					goAway = time.Since(start)
				}
			}
		}
		t.Logf("an idle connection was sent GOAWAY after %v and closed after %v", goAway.Round(10*time.Millisecond), time.Since(start).Round(10*time.Millisecond))
		if goAway > idle+5*time.Second {
			t.Errorf("GOAWAY after %v, want after about %v", goAway, idle)
		}
	})
}

// closedAtOnce reports whether the server closes c within window, rather
// than keeping it open (reading from it, or sending its SETTINGS).
func closedAtOnce(c net.Conn, window time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(window))
	_, err := io.Copy(io.Discard, c)
	return isClosed(err)
}

// TestMaxConnections: with limits.max_connections 3, each listener holds
// 3 connections (that send nothing yet), closes a fourth at once and
// counts it under its listener label; when one closes, a new one is held.
func TestMaxConnections(t *testing.T) {
	t.Parallel()
	const max = 3
	e := newTestEnv(t, func(c *config.Config) {
		c.Limits.MaxConnections = max
		c.Operator.Addr = "127.0.0.1:0"
	})
	for _, l := range []struct{ name, addr string }{{"grpc", e.grpcAddr}, {"http", e.httpAddr}, {"operator", e.operatorAddr}} {
		dial := func() net.Conn {
			c, err := net.Dial("tcp", l.addr)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		var held []net.Conn
		refused := false
		for range max + 3 {
			c := dial()
			if closedAtOnce(c, 300*time.Millisecond) {
				c.Close()
				refused = true
				break
			}
			held = append(held, c)
		}
		if len(held) != max || !refused {
			t.Errorf("%s: held %d connections (one more refused: %v), want %d and the next refused", l.name, len(held), refused, max)
		}
		if len(held) > 0 {
			held[0].Close()
			held = held[1:]
			waitFor(t, 10*time.Second, l.name+": a connection held after one closed", func() bool {
				c := dial()
				if closedAtOnce(c, 300*time.Millisecond) {
					c.Close()
					return false
				}
				held = append(held, c)
				return true
			})
		}
		for _, c := range held {
			c.Close()
		}
	}
	// Scraped last, on a connection of the operator port's own, once the
	// others have closed.
	var refused map[string]float64
	waitFor(t, 10*time.Second, "a scrape of the operator port", func() bool {
		f, ok := tryScrapeAt(t, "http://"+e.operatorAddr)
		refused = series(f, "sheba_connections_refused_total", "listener")
		return ok
	})
	for _, l := range []string{"grpc", "http", "operator"} {
		if refused["listener="+l] < 1 {
			t.Errorf("sheba_connections_refused_total{listener=%q}: got %v, want at least 1", l, refused["listener="+l])
		}
	}
}

// TestWriteTimeout: a client that stops reading a large answer (16 MB of
// subscriptions, larger than what the sockets buffer) is cut when
// http.write_timeout (1 s here) runs out; it used to get the whole answer
// whenever it read again.
func TestWriteTimeout(t *testing.T) {
	t.Parallel()
	const subscriptions = 80_000
	big := &shebav1.ListSubscriptionsResponse{}
	for range subscriptions {
		big.Subscriptions = append(big.Subscriptions, &shebav1.Subscription{
			Id: "0b5f4cb2-6c4e-4b43-9f4a-2a1d7a0e5c11", AccountId: "7d1c2a54-9a77-4a2f-8f0e-4d5e3c2b1a00", Plan: "pro",
			Status: shebav1.SubscriptionStatus_SUBSCRIPTION_STATUS_ACTIVE, CreateTime: timestamppb.Now(),
		})
	}
	answer := app.WithUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if info.FullMethod == shebav1.SubscriptionService_ListSubscriptions_FullMethodName {
			return big, nil
		}
		return handler(ctx, req)
	})
	e := newTestEnvWith(t, nil, []app.Option{answer}, func(c *config.Config) { c.HTTP.WriteTimeout = time.Second })

	// A small receive buffer, so that the kernel holds little of the
	// answer for the client.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		_ = rc.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return err
	}}
	c, err := d.DialContext(t.Context(), "tcp", e.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /v1/subscriptions HTTP/1.1\r\nHost: sheba\r\nX-Api-Key: "+testKey+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // not reading
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Logf("cut before the answer's headers: %v", err)
		return
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	t.Logf("%s, then %d bytes of the body, then %v", resp.Status, n, err)
	if err == nil {
		t.Errorf("the whole answer (%d bytes) came to a client that stopped reading for 3 s, want it cut after http.write_timeout (1 s)", n)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("the connection was still open 30 s later: want it closed at the write timeout")
	}
}

// TestSlowBodyAnswered: a keyed request whose body takes longer to arrive
// than http.write_timeout (1 s here), yet within http.read_timeout, is
// answered, on REST and on Connect: the write timeout counts again from
// the end of the body, not only from the headers as net/http counts it
// (such a request got no answer).
func TestSlowBodyAnswered(t *testing.T) {
	t.Parallel()
	e := newTestEnvWith(t, nil, nil, func(c *config.Config) {
		c.HTTP.WriteTimeout = time.Second
		c.HTTP.ReadTimeout = 20 * time.Second
	})
	for _, test := range []struct{ name, path, extra, username string }{
		{"REST", "/v1/accounts", "", "slowrest"},
		{"Connect", shebav1.AccountService_CreateAccount_FullMethodName, "Connect-Protocol-Version: 1\r\n", "slowconnect"},
	} {
		t.Run(test.name, func(t *testing.T) {
			t.Parallel()
			body := fmt.Sprintf(`{"username":%q,"password":"correct horse"}`, test.username)
			c, err := net.Dial("tcp", e.httpAddr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: sheba\r\nX-Api-Key: %s\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n",
				test.path, testKey, test.extra, len(body))
			if _, err := io.WriteString(c, head+body[:10]); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2500 * time.Millisecond) // the rest of the body comes late
			if _, err := io.WriteString(c, body[10:]); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no answer to a body sent within http.read_timeout: %v", err)
			}
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(got), `"username":"`+test.username+`"`) {
				t.Errorf("got %s %s (%v), want 200 and the account", resp.Status, got, err)
			}
		})
	}
}

// TestTLSHandshakeErrors sends plaintext HTTP and broken ClientHellos to
// both TLS listeners for 3 s: every failed handshake is counted in
// sheba_tls_handshake_errors_total under its listener, and they are logged
// at most once a second.
func TestTLSHandshakeErrors(t *testing.T) {
	t.Parallel()
	e, _, _ := tlsTestEnv(t)
	logStart := len(e.logs.String())
	const flood = 3 * time.Second
	end := time.Now().Add(flood)
	failed := map[string]*atomic.Int64{"grpc": new(atomic.Int64), "http": new(atomic.Int64)}
	var wg sync.WaitGroup
	for name, addr := range map[string]string{"grpc": e.grpcAddr, "http": e.httpAddr} {
		for i := range 4 {
			wg.Go(func() {
				for time.Now().Before(end) {
					c, err := net.Dial("tcp", addr)
					if err != nil {
						continue
					}
					if i%2 == 0 {
						_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: sheba\r\n\r\n")
					} else {
						// A handshake record whose message claims 16 MiB.
						_, _ = c.Write([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0xff, 0xff, 0xff, 0x00})
					}
					if closedAtOnce(c, 5*time.Second) {
						failed[name].Add(1)
					}
					c.Close()
				}
			})
		}
	}
	wg.Wait()
	// grpc-go's TLS credentials close a connection before they return its
	// handshake's error: the count may come a moment after the close.
	var counted map[string]float64
	settle := time.Now().Add(5 * time.Second)
	for {
		counted = series(scrapeAt(t, "http://"+e.operatorAddr), "sheba_tls_handshake_errors_total", "listener")
		if counted["listener=grpc"] >= float64(failed["grpc"].Load()) && counted["listener=http"] >= float64(failed["http"].Load()) ||
			time.Now().After(settle) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, name := range []string{"grpc", "http"} {
		got, want := counted["listener="+name], float64(failed[name].Load())
		t.Logf("%s: %v failed handshakes, %v counted", name, want, got)
		if want == 0 || got < want {
			t.Errorf("%s: %v failed handshakes counted, want at least the %v the client saw", name, got, want)
		}
	}
	perSecond := map[int64][]string{}
	for line := range strings.Lines(e.logs.String()[logStart:]) {
		var rec struct {
			Time     time.Time `json:"time"`
			Msg      string    `json:"msg"`
			Listener string    `json:"listener"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && strings.Contains(rec.Msg, "TLS handshake") {
			perSecond[rec.Time.Unix()] = append(perSecond[rec.Time.Unix()], rec.Listener)
		}
	}
	t.Logf("log lines of failed handshakes by second, by listener: %v", perSecond)
	if len(perSecond) == 0 {
		t.Error("no log line of the failed handshakes")
	}
	for sec, lines := range perSecond {
		if len(lines) > 1 {
			t.Errorf("%d log lines of failed handshakes in the second %v, want at most 1", len(lines), time.Unix(sec, 0).UTC())
		}
	}
}
