package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// server is a running server process and where to reach it.
type server struct {
	proc     *proc
	httpURL  string // http://127.0.0.1:PORT, or ""
	grpcAddr string // 127.0.0.1:PORT, or ""
	unixPath string // a unix socket it serves http on (hookecho), or ""
}

// shebaConfig is what differs between the sheba processes of a run.
type shebaConfig struct {
	maxInflight int
	// sampler is OTEL_TRACES_SAMPLER when the binary has tracing.
	sampler string
	// env is added to the process's environment (SHEBA_REDIS_URL, ...).
	env []string
	// databaseURL, set, is DATABASE_URL instead of the bench's database.
	databaseURL string
	// keys are API keys configured beside the bench's (the event rows'
	// streams, a few to a key).
	keys []apiKey
}

// apiKey is the bench's API key: made fresh for each run, its SHA-256 goes
// in the generated config and the key itself in the x-api-key header.
type apiKey struct {
	id, key, sha256 string
}

func newAPIKey() apiKey {
	var raw [32]byte
	_, _ = rand.Read(raw[:])
	key := base64.RawURLEncoding.EncodeToString(raw[:])
	sum := sha256.Sum256([]byte(key))
	return apiKey{id: "bench", key: key, sha256: hex.EncodeToString(sum[:])}
}

// shebaYAML is the config file of a sheba process: the full chain as far as
// the config has it, with limits high enough never to reject (rate limits
// on, so their buckets run, at a million a second), and the bench key when
// auth is on. SHEBA_LIMITS_MAX_INFLIGHT and SHEBA_LOG_LEVEL come from the
// environment.
func shebaYAML(httpPort, grpcPort int, key *apiKey, more ...apiKey) string {
	var b strings.Builder
	fmt.Fprintf(&b, `# Written by sheba-bench for one run; deleted with the run's folder.
http: { addr: "127.0.0.1:%d" }
grpc: { addr: "127.0.0.1:%d", reflection: true }
database: { max_conns: 16 }
limits:
  rate: 1000000
  burst: 1000000
  per_key_rate: 1000000
  per_key_burst: 1000000
  timeout: 5s
`, httpPort, grpcPort)
	if key != nil {
		fmt.Fprintf(&b, `auth:
  keys:
    - { id: %q, sha256: %q }
`, key.id, key.sha256)
		for _, k := range more {
			fmt.Fprintf(&b, "    - { id: %q, sha256: %q }\n", k.id, k.sha256)
		}
		b.WriteString(`  public: ["/sheba.v1.PingService/Ping"]
`)
	}
	b.WriteString("log: { format: json }\n")
	return b.String()
}

// startSheba starts a sheba process pinned to the server CPU and waits until
// /readyz says it reaches Postgres.
func (b *bench) startSheba(ctx context.Context, name string, sc shebaConfig) (*server, error) {
	httpPort, err := freePort()
	if err != nil {
		return nil, err
	}
	grpcPort, err := freePort()
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(b.dir, name+".yaml")
	var key *apiKey
	if b.opts.auth {
		key = &b.key
	}
	if err := os.WriteFile(cfgPath, []byte(shebaYAML(httpPort, grpcPort, key, sc.keys...)), 0o600); err != nil {
		return nil, err
	}
	dbURL := sc.databaseURL
	if dbURL == "" {
		dbURL = b.pg.url("sheba")
	}
	env := []string{
		"DATABASE_URL=" + dbURL,
		"SHEBA_LIMITS_MAX_INFLIGHT=" + strconv.Itoa(sc.maxInflight),
		"SHEBA_LOG_LEVEL=warn",
	}
	if b.tracing != "" && b.sink != nil {
		env = append(env, b.otelEnv(sc.sampler)...)
	}
	env = append(env, sc.env...)
	p, err := startProc(name, b.dir, env, b.pin.command(b.opts.serverCPU, b.bins.sheba, "serve", "--config", cfgPath)...)
	if err != nil {
		return nil, err
	}
	s := &server{proc: p, httpURL: fmt.Sprintf("http://127.0.0.1:%d", httpPort), grpcAddr: fmt.Sprintf("127.0.0.1:%d", grpcPort)}
	if err := p.waitReady(ctx, 30*time.Second, func(ctx context.Context) error { return httpOK(ctx, s.httpURL+"/readyz") }); err != nil {
		p.stop(5 * time.Second)
		return nil, err
	}
	return s, nil
}

// otelEnv configures sheba's OpenTelemetry SDK with the standard variables:
// OTLP to the no-op sink, the given sampler.
func (b *bench) otelEnv(sampler string) []string {
	endpoint := "http://" + b.sink.grpcAddr
	tracesEndpoint := endpoint
	if b.tracing == "http/protobuf" {
		endpoint = strings.TrimSuffix(b.sink.httpURL, "/")
		tracesEndpoint = endpoint + "/v1/traces"
	}
	return []string{
		"OTEL_SERVICE_NAME=sheba-bench",
		"OTEL_TRACES_EXPORTER=otlp",
		"OTEL_METRICS_EXPORTER=none",
		"OTEL_LOGS_EXPORTER=none",
		"OTEL_EXPORTER_OTLP_PROTOCOL=" + b.tracing,
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=" + b.tracing,
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint,
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=" + tracesEndpoint,
		"OTEL_EXPORTER_OTLP_INSECURE=true",
		"OTEL_TRACES_SAMPLER=" + sampler,
	}
}

// startBaseline starts one of the programs under bench/baseline pinned to
// the server CPU.
func (b *bench) startBaseline(ctx context.Context, name, bin string, grpcServer bool, env ...string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := startProc(name, b.dir, env, b.pin.command(b.opts.serverCPU, bin, "-addr", addr)...)
	if err != nil {
		return nil, err
	}
	s := &server{proc: p}
	check := func(ctx context.Context) error { return httpAny(ctx, "http://"+addr+"/") }
	if grpcServer {
		s.grpcAddr = addr
		check = func(ctx context.Context) error { return grpcPing(ctx, addr) }
	} else {
		s.httpURL = "http://" + addr
	}
	if err := p.waitReady(ctx, 30*time.Second, check); err != nil {
		p.stop(5 * time.Second)
		return nil, err
	}
	return s, nil
}

// startSink starts the no-op OTLP collector (this binary's otlpsink) on the
// load generator's CPU: in production the collector is elsewhere.
func (b *bench) startSink(ctx context.Context) (*server, error) {
	return b.startHTTPGRPC(ctx, "otlpsink", b.opts.loadCPU, func(httpAddr, grpcAddr string) []string {
		return []string{b.self, "otlpsink", "-http", httpAddr, "-grpc", grpcAddr}
	})
}

// startHTTPGRPC starts argv(httpAddr, grpcAddr) pinned to cpu: a helper
// that listens on both, on free ports of 127.0.0.1, before it serves either.
// It waits until the http listener answers GET /.
func (b *bench) startHTTPGRPC(ctx context.Context, name string, cpu int, argv func(httpAddr, grpcAddr string) []string) (*server, error) {
	hp, err := freePort()
	if err != nil {
		return nil, err
	}
	gp, err := freePort()
	if err != nil {
		return nil, err
	}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", hp)
	s := &server{httpURL: "http://" + httpAddr, grpcAddr: fmt.Sprintf("127.0.0.1:%d", gp)}
	if s.proc, err = startProc(name, b.dir, nil, b.pin.command(cpu, argv(httpAddr, s.grpcAddr)...)...); err != nil {
		return nil, err
	}
	if err := s.proc.waitReady(ctx, 10*time.Second, func(ctx context.Context) error { return httpAny(ctx, s.httpURL+"/") }); err != nil {
		s.proc.stop(time.Second)
		return nil, err
	}
	return s, nil
}

// startRedis starts a redis-server without persistence, pinned to the
// server CPU like Postgres (it serves sheba), and waits until it accepts
// connections.
func (b *bench) startRedis(ctx context.Context) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := startProc("redis", b.dir, nil, b.pin.command(b.opts.serverCPU, "redis-server",
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", b.dir, "--save", "", "--appendonly", "no")...)
	if err != nil {
		return nil, err
	}
	s := &server{proc: p, grpcAddr: addr}
	if err := p.waitReady(ctx, 10*time.Second, func(ctx context.Context) error {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		p.stop(time.Second)
		return nil, err
	}
	return s, nil
}

// httpOK succeeds when GET url answers 200.
func httpOK(ctx context.Context, url string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// httpAny succeeds when url answers at all.
func httpAny(ctx context.Context, url string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

func grpcPing(ctx context.Context, addr string) error {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	_, err = shebav1.NewPingServiceClient(cc).Ping(ctx, &shebav1.PingRequest{})
	return err
}
