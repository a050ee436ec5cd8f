package e2e

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/e2e/resttest"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// A public method's body is read within its own small bound, without a
// body slot (docs/operations.md#slow-clients): callers without a key, however
// many and however slow, never hold a slot a keyed body needs.

// publicBodyBound is the most a call to a public method without a key may
// bring as its body (docs/api.md#authentication).
const publicBodyBound = 4 << 10

// holdSlowBody opens a connection, sends head and the first byte of its
// body, and holds it open until the test ends.
func holdSlowBody(t *testing.T, addr, head string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte(head)); err != nil {
		t.Fatalf("slow body: %v", err)
	}
}

// TestPublicSlowBodiesTakeNoSlot is the audit's shape: more connections
// without a key than there are body slots (http.max_concurrent_bodies,
// 64 by default) each send the headers of a call to the public Ping with
// Content-Length: 1000 and one byte of the body, then stall, over Connect,
// gRPC-Web and REST (a GET /v1/ping with a body). Keyed creates, over REST
// and Connect, are meanwhile answered 200 as usual: the stalled bodies hold
// no slot (they used to hold all of them, and a keyed create answered 429
// after the second's wait for a slot).
func TestPublicSlowBodiesTakeNoSlot(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	slots := cfg.HTTP.MaxConcurrentBodies
	e := newTestEnv(t, func(c *config.Config) {
		// The stalled connections are closed by the test; this only
		// bounds them should it fail.
		c.HTTP.ReadTimeout = 30 * time.Second
	})
	waitReady(t, e)
	const ping = shebav1.PingService_Ping_FullMethodName
	heads := []string{
		"POST " + ping + " HTTP/1.1\r\nHost: sheba\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{",
		"POST " + ping + " HTTP/1.1\r\nHost: sheba\r\nContent-Type: application/grpc-web+proto\r\nContent-Length: 1000\r\n\r\n\x00",
		"GET /v1/ping HTTP/1.1\r\nHost: sheba\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{",
	}
	// 300 ms: the time for the server to read their headers; were they
	// given slots, they would then hold every one of them.
	wantKeyedCreatesWhileStalled(t, e, heads, slots+8, 300*time.Millisecond, func(i int) {
		start := time.Now()
		a := browserCall[shebav1.CreateAccountRequest, shebav1.CreateAccountResponse](t, e, "connect-json",
			shebav1.AccountService_CreateAccount_FullMethodName,
			&shebav1.CreateAccountRequest{Username: "public-slow-connect-" + strconv.Itoa(i), Password: "password1"}, testKey)
		took := time.Since(start)
		t.Logf("keyed Connect CreateAccount %d with %d keyless public bodies stalled: %v in %v", i, slots+8, a.st.Code(), took)
		if a.st != nil {
			t.Errorf("keyed Connect create %d: got %v %q after %v, want OK", i, a.st.Code(), a.st.Message(), took)
		}
	})
}

// TestPublicBodyBound checks the small bound of a public method's body
// without a key: over it, as declared, as sent or once decompressed, the
// call is refused RESOURCE_EXHAUSTED BODY_TOO_LARGE in the protocol's
// format (REST 413); with a key, the same body is read as any keyed body
// is, within http.max_body_bytes.
func TestPublicBodyBound(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, func(c *config.Config) { c.HTTP.ReadTimeout = 30 * time.Second })
	const ping = shebav1.PingService_Ping_FullMethodName
	// A CreateAccountRequest is, in protobuf, a PingRequest with an
	// unknown field: a valid Ping request of any size.
	big := &shebav1.CreateAccountRequest{Username: strings.Repeat("a", publicBodyBound+1)}
	small := &shebav1.CreateAccountRequest{Username: strings.Repeat("a", publicBodyBound-64)}
	for _, p := range []string{"connect-proto", "connect-proto+gzip", "grpc-web", "grpc-web-text"} {
		t.Run(p, func(t *testing.T) {
			a := browserCall[shebav1.CreateAccountRequest, shebav1.PingResponse](t, e, p, ping, big, "")
			wantBrowserError(t, a, codes.ResourceExhausted, reason.BodyTooLarge, "")
			if !strings.Contains(a.st.Message(), strconv.Itoa(publicBodyBound)) {
				t.Errorf("message %q does not name the bound %d", a.st.Message(), publicBodyBound)
			}
			if a.header.Get("Retry-After") == "" {
				t.Error("no Retry-After on RESOURCE_EXHAUSTED")
			}
			if a := browserCall[shebav1.CreateAccountRequest, shebav1.PingResponse](t, e, p, ping, big, testKey); a.st != nil {
				t.Errorf("with a key: got %v %q, want OK", a.st.Code(), a.st.Message())
			}
			if p == "grpc-web-text" {
				// Within the bound as a message, not as base64.
				return
			}
			if a := browserCall[shebav1.CreateAccountRequest, shebav1.PingResponse](t, e, p, ping, small, ""); a.st != nil {
				t.Errorf("without a key, within the bound: got %v %q, want OK", a.st.Code(), a.st.Message())
			}
		})
	}
	// JSON whitespace: an empty request of any size.
	padded := "{" + strings.Repeat(" ", publicBodyBound) + "}"
	t.Run("connect-json", func(t *testing.T) {
		r := e.do(t, http.MethodPost, ping, padded, "X-Api-Key", "")
		if r.Code != http.StatusTooManyRequests {
			t.Errorf("got HTTP %d (%s), want 429", r.Code, r.Body)
		} else if st := resttest.ConnectStatus(t, r.Body); st.Code() != codes.ResourceExhausted || reasonOf(st) != reason.BodyTooLarge {
			t.Errorf("got %v %s, want ResourceExhausted %s", st.Code(), reasonOf(st), reason.BodyTooLarge)
		}
		wantCode(t, e.do(t, http.MethodPost, ping, padded), http.StatusOK)
		wantCode(t, e.do(t, http.MethodPost, ping, "{}", "X-Api-Key", ""), http.StatusOK)
	})
	t.Run("rest", func(t *testing.T) {
		r := e.do(t, http.MethodGet, "/v1/ping", padded, "X-Api-Key", "")
		st := wantRESTError(t, r, http.StatusRequestEntityTooLarge, codes.ResourceExhausted, "")
		if got := reasonOf(status.FromProto(st)); got != reason.BodyTooLarge {
			t.Errorf("got reason %q, want %s", got, reason.BodyTooLarge)
		}
		wantCode(t, e.do(t, http.MethodGet, "/v1/ping", padded), http.StatusOK)
		wantCode(t, e.do(t, http.MethodGet, "/v1/ping", "{}", "X-Api-Key", ""), http.StatusOK)
	})
	t.Run("refused before it is read", func(t *testing.T) {
		for _, head := range []string{
			"POST " + ping + " HTTP/1.1\r\nHost: sheba\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{",
			"GET /v1/ping HTTP/1.1\r\nHost: sheba\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{",
		} {
			c, err := net.DialTimeout("tcp", e.httpAddr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte(head)); err != nil {
				t.Fatal(err)
			}
			// Far less than http.read_timeout: the answer does not wait
			// for the body.
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				t.Fatalf("%q: no answer before the body was sent: %v", head[:30], err)
			}
			if !strings.Contains(line, " 413 ") && !strings.Contains(line, " 429 ") {
				t.Errorf("%q: got %q, want 413 (REST) or 429 (Connect)", head[:30], strings.TrimSpace(line))
			}
		}
	})
}
