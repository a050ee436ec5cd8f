package faults

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/e2e/keyedwrites"
	"github.com/shebasvc/sheba/e2e/shebaproc"
	"github.com/shebasvc/sheba/internal/app"
	"github.com/shebasvc/sheba/store/storetest"
	"github.com/shebasvc/sheba/webhooks/webhookstest"
)

// The API key of the tests' client.
const (
	testKey   = "faults-key-0123456789abcdefghijklmnopqrs"
	testKeyID = "faults"
)

// link is a Toxiproxy proxy between sheba and Postgres, in this process:
// sheba's database.url names its address, and toxics added to it act on
// every connection through it, open or new.
type link struct {
	proxy *toxiproxy.Proxy
}

// newLink starts a proxy on 127.0.0.1 to upstream; it stops when the test
// ends.
func newLink(t *testing.T, upstream string) *link {
	t.Helper()
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	proxy := toxiproxy.NewProxy(server, "postgres", "127.0.0.1:0", upstream)
	if err := proxy.Start(); err != nil {
		t.Fatalf("toxiproxy: %v", err)
	}
	t.Cleanup(proxy.Stop)
	return &link{proxy: proxy}
}

// addr is the address the proxy listens on.
func (l *link) addr() string { return l.proxy.Listen }

// toxic is a toxic as Toxiproxy's API takes it
// (https://github.com/Shopify/toxiproxy#toxics).
type toxic struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Stream     string         `json:"stream"` // "upstream" (to Postgres) or "downstream"
	Toxicity   float32        `json:"toxicity"`
	Attributes map[string]any `json:"attributes"`
}

// add adds tx to the link.
func (l *link) add(tx toxic) error {
	b, err := json.Marshal(tx)
	if err != nil {
		return err
	}
	if _, err := l.proxy.Toxics.AddToxicJson(bytes.NewReader(b)); err != nil {
		return fmt.Errorf("add toxic %s: %w", b, err)
	}
	return nil
}

// clear removes every toxic.
func (l *link) clear() { l.proxy.Toxics.ResetToxics(context.Background()) }

// sheba is the service under test, assembled by internal/app as the
// command does, in this process, on listeners of its own; its database is
// reached through a link.
type sheba struct {
	client keyedwrites.Client
	// pool goes straight to the database, around the link: the test's own
	// reads.
	pool *pgxpool.Pool
	link *link
	// receiver is a webhook endpoint on 127.0.0.1 that takes everything;
	// webhooks.allow_private_networks lets it be registered.
	receiver *webhookstest.Receiver
	logs     *shebaproc.Buffer
}

// startSheba starts sheba over a fresh database behind a link, with its
// config changed by mutate. It is stopped (the link's toxics removed
// first) when the test ends.
func startSheba(t *testing.T, mutate func(*config.Config)) *sheba {
	t.Helper()
	dbURL := storetest.NewDatabase(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("test database URL: %v", err)
	}
	l := newLink(t, u.Host)
	u.Host = l.addr()

	sum := sha256.Sum256([]byte(testKey))
	cfg := config.Default()
	cfg.Database.URL = u.String()
	// Many servers share the test cluster at once.
	cfg.Database.MaxConns = 8
	cfg.Shutdown.Timeout = 10 * time.Second
	cfg.Auth.Keys = []config.APIKey{{ID: testKeyID, SHA256: hex.EncodeToString(sum[:])}}
	cfg.Webhooks.AllowPrivateNetworks = true
	mutate(&cfg)
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test config: %v", err)
	}
	// Before sheba, so that it stops before the receiver closes.
	receiver := webhookstest.NewReceiver(t, webhookstest.Status(http.StatusNoContent))

	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(pool.Close)

	logs := &shebaproc.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := app.New(ctx, cfg, log, app.WithHealthInterval(500*time.Millisecond))
	if err != nil {
		cancel()
		t.Fatalf("app.New: %v", err)
	}
	lis := app.Listeners{GRPC: listen(t), HTTP: listen(t)}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		// A test that failed half way may leave the link broken, and the
		// shutdown would wait on it.
		l.clear()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if t.Failed() {
			t.Logf("sheba's log, from WARN up (at most the last 100 lines):\n%s", warnings(logs.String(), 100))
		}
	})
	return &sheba{
		client: keyedwrites.Client{
			BaseURL: "http://" + lis.HTTP.Addr().String(),
			Key:     testKey,
			// Far beyond limits.timeout: sheba answers every write,
			// whatever the link does, long before.
			HTTP: &http.Client{Timeout: 30 * time.Second},
			// At most 200 writes a second from the 4 clients, so that
			// the load lasts as long as the scenario says.
			Pace: 20 * time.Millisecond,
		},
		pool:     pool,
		link:     l,
		receiver: receiver,
		logs:     logs,
	}
}

// ready waits until sheba says it is ready (Postgres answers its health
// check), at most d.
func (s *sheba) ready(t *testing.T, d time.Duration) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := client.Get(s.client.BaseURL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
	}
	t.Fatalf("sheba not ready within %v", d)
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	return lis
}

// warnings returns the last n lines of log that are not at level INFO or
// DEBUG.
func warnings(log string, n int) string {
	var lines []string
	for line := range strings.Lines(log) {
		if !strings.Contains(line, `"level":"INFO"`) && !strings.Contains(line, `"level":"DEBUG"`) {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], "")
}
