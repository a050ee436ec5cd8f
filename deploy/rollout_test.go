//go:build rollout

// The rolling-restart test of docs/deployment.md: run it with
// `make test-deploy` (it needs HAProxy and a Postgres, which that target
// and .ci/run provide).
package deploy_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"text/template"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/shebasvc/sheba/e2e/shebaproc"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/store/storetest"
)

// The load balancer checks each replica as a kubelet would, only faster,
// so the test takes seconds: every checkInter, a check that fails after
// checkTimeout; checkFall failures in a row take a replica out,
// checkRise successes put it back. HAProxy ends an external check (the
// gRPC one) after checkInter, and on a busy machine starting
// grpc_health_probe can take most of a second: three misses in a row, not
// one, make a replica down.
const (
	checkInter   = time.Second
	checkTimeout = time.Second
	checkFall    = 3
	checkRise    = 2
)

// drainDelay is the replicas' shutdown.drain_delay: twice the longest the
// load balancer can take to see a replica fail (checkFall checks, the last
// one timing out), as deploy/kubernetes/config.yaml does against the
// readiness probe. The replica must outlast it before its listeners close.
const drainDelay = 2 * (checkFall*checkInter + checkTimeout)

// The load: each worker sends one request per interval, and stops after
// maxPerWorker requests if the test has not stopped it before.
const (
	readInterval  = 20 * time.Millisecond  // 2 workers x 2 reads x 2 transports: 400 requests/s
	writeInterval = 250 * time.Millisecond // 1 worker x 2 transports: 8 accounts/s (argon2id hashes)
	maxPerWorker  = 10000
)

func TestMain(m *testing.M) { os.Exit(storetest.Run(m)) }

// TestRollingRestart runs two sheba replicas behind HAProxy, which
// health-checks them like a kubelet's readiness probes would (HTTP GET
// /readyz; gRPC health with grpc_health_probe over h2c), and restarts each
// replica in turn (SIGTERM, wait for exit, start again, wait until the
// load balancer takes it back) while reads and writes run on both
// transports through the load balancer. No request may fail, and the load
// balancer must not have needed a retry: the drain alone kept requests
// away from closing listeners.
func TestRollingRestart(t *testing.T) {
	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		t.Fatal("haproxy not found: install it (Debian: apt-get install haproxy); .ci/run does")
	}
	dir := t.TempDir()
	sheba := shebaproc.Binary(t)
	probe := buildProbe(t, dir)
	config, err := filepath.Abs("kubernetes/config.yaml")
	if err != nil {
		t.Fatal(err)
	}

	key, keys := newAPIKey(t)
	env := []string{
		"SHEBA_CONFIG=" + config, // the ConfigMap's file, as in the cluster
		"DATABASE_URL=" + storetest.NewDatabase(t),
		"SHEBA_AUTH_KEYS=" + keys, // the Secret's auth-keys, as in the cluster
		"SHEBA_SHUTDOWN_DRAIN_DELAY=" + drainDelay.String(),
	}
	replicas := []*replica{newReplica(t, "a", sheba, env), newReplica(t, "b", sheba, env)}
	for _, r := range replicas {
		r.Start(t)
	}
	lb := startHAProxy(t, dir, haproxy, probe, replicas)
	for _, r := range replicas {
		lb.waitUp(t, r.name)
	}

	client := newClients(t, lb, key)
	account := client.createAccountREST(t.Context(), "rollout-reader")
	if account == "" {
		t.Fatal("could not create the account the load reads")
	}

	load := startLoad(client, account)
	began := time.Now()
	time.Sleep(time.Second)
	for _, r := range replicas {
		stopped := time.Now()
		code := r.Stop(t)
		if code != 0 {
			t.Errorf("replica %s exited %d after SIGTERM, want 0; log:\n%s", r.name, code, r.Logs())
		}
		exited := time.Since(stopped)
		r.Start(t)
		lb.waitUp(t, r.name)
		t.Logf("replica %s: exited %v after SIGTERM (drain_delay %v), back in the load balancer %v after SIGTERM",
			r.name, exited.Round(10*time.Millisecond), drainDelay, time.Since(stopped).Round(10*time.Millisecond))
	}
	time.Sleep(time.Second)
	results := load.stop()
	duration := time.Since(began)

	var total, failed int64
	for _, res := range results {
		total += res.ok + res.failed
		failed += res.failed
		t.Logf("%-20s %6d ok %3d failed %s", res.name, res.ok, res.failed, strings.Join(res.errors, "; "))
		if res.ok == 0 {
			t.Errorf("%s: no request succeeded: the load did not run", res.name)
		}
	}
	t.Logf("load: %d requests in %v (%.0f/s) over REST and gRPC through HAProxy, %d failed",
		total, duration.Round(10*time.Millisecond), float64(total)/duration.Seconds(), failed)
	if failed != 0 {
		t.Errorf("%d of %d requests failed during the rolling restart, want 0", failed, total)
	}

	stats := lb.stats(t)
	for _, backend := range []string{"rest", "grpc"} {
		for _, r := range replicas {
			s := stats[backend+"/"+r.name]
			t.Logf("haproxy %s/%s: %s 2xx responses, %d non-2xx, went down %s times", backend, r.name,
				s["hrsp_2xx"], sumFields(s, "hrsp_1xx", "hrsp_3xx", "hrsp_4xx", "hrsp_5xx", "hrsp_other"), s["chkdown"])
			if s["hrsp_2xx"] == "" || s["hrsp_2xx"] == "0" {
				t.Errorf("haproxy %s/%s served nothing: the load did not reach both replicas", backend, r.name)
			}
			if s["chkdown"] == "" || s["chkdown"] == "0" {
				t.Errorf("haproxy never saw %s/%s go down: its health check did not notice the drain", backend, r.name)
			}
		}
		b := stats[backend+"/BACKEND"]
		t.Logf("haproxy %s: %s retries, %s redispatches", backend, b["wretr"], b["wredis"])
		if sumFields(b, "wretr", "wredis") != 0 {
			t.Errorf("haproxy %s retried or redispatched requests: they reached a replica that was closing (drain_delay %v too short for the checks?)", backend, drainDelay)
		}
	}
}

// buildProbe builds grpc_health_probe, pinned in the tools module, into
// dir and returns the binary's path.
func buildProbe(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "grpc_health_probe")
	cmd := exec.Command("go", "build", "-o", bin, "-modfile=../tools/go.mod", "github.com/grpc-ecosystem/grpc-health-probe")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build grpc_health_probe: %v\n%s", err, out)
	}
	return bin
}

// newAPIKey returns a fresh key and the SHEBA_AUTH_KEYS value that accepts
// it.
func newAPIKey(t *testing.T) (key, keys string) {
	key = rand.Text()
	sum := sha256.Sum256([]byte(key))
	b, err := json.Marshal([]map[string]string{{"id": "rollout", "sha256": hex.EncodeToString(sum[:])}})
	if err != nil {
		t.Fatal(err)
	}
	return key, string(b)
}

func sumFields(m map[string]string, keys ...string) int64 {
	var n int64
	for _, k := range keys {
		v, _ := strconv.ParseInt(m[k], 10, 64)
		n += v
	}
	return n
}

// ------------------------------------------------------------------ replicas

// replica is one sheba process, started again on the same ports after
// each stop.
type replica struct {
	name string
	*shebaproc.Process
}

func newReplica(t *testing.T, name, bin string, env []string) *replica {
	return &replica{name: name, Process: shebaproc.New(t, bin, env...)}
}

// ------------------------------------------------------------------ HAProxy

// haproxyConfig routes REST and gRPC to the replicas. HAProxy keeps
// connections to each replica open between requests (HTTP/1 keep-alive to
// the REST port, one multiplexed HTTP/2 connection to the gRPC port). Once
// its checks mark a replica down it sends nothing new on them; sheba, at
// the end of its drain, closes the idle HTTP ones and sends GOAWAY on the
// HTTP/2 ones, which HAProxy then drops. The retry settings are those of
// production: a request whose connection fails or closes before an answer
// is sent again, to another server, so a replica that goes away at a bad
// moment costs a retry and not an error. With drain_delay 0 that is what
// keeps clients whole, and hides the problem, which is why the test
// counts retries and redispatches too.
var haproxyConfig = template.Must(template.New("haproxy").Parse(`
global
    # The gRPC check runs grpc_health_probe, as a kubelet exec probe does.
    external-check
    insecure-fork-wanted
    stats socket {{.Socket}} level user

defaults
    mode http
    timeout connect 1s
    timeout client 30s
    timeout server 30s
    timeout check {{.CheckTimeout}}
    retries 3
    option redispatch 1
    retry-on conn-failure empty-response junk-response response-timeout
    default-server inter {{.Inter}} fall {{.Fall}} rise {{.Rise}}

frontend rest
    bind 127.0.0.1:{{.RESTPort}}
    default_backend rest

backend rest
    # The readiness probe of HTTP: 200 while ready, 503 while Postgres is
    # away or sheba drains.
    option httpchk GET /readyz
    http-check expect status 200
{{- range .Replicas}}
    server {{.Name}} 127.0.0.1:{{.HTTPPort}} check
{{- end}}

frontend grpc
    bind 127.0.0.1:{{.GRPCPort}} proto h2
    default_backend grpc

backend grpc
    # grpc.health.v1 over h2c: SERVING while ready.
    option external-check
    external-check path "/usr/bin:/bin"
    external-check command {{.Check}}
{{- range .Replicas}}
    server {{.Name}} 127.0.0.1:{{.GRPCPort}} proto h2 check
{{- end}}
`))

// grpcCheck is HAProxy's external check command: it is called with the
// server's address and port as its third and fourth arguments.
var grpcCheck = template.Must(template.New("check").Parse(`#!/bin/sh
exec {{.Probe}} -addr="$3:$4" -connect-timeout={{.Timeout}} -rpc-timeout={{.Timeout}} >/dev/null 2>&1
`))

type loadBalancer struct {
	restAddr, grpcAddr string
	socket             string
	logs               *shebaproc.Buffer
}

func startHAProxy(t *testing.T, dir, haproxy, probe string, replicas []*replica) *loadBalancer {
	t.Helper()
	lb := &loadBalancer{
		restAddr: shebaproc.FreeAddr(t),
		grpcAddr: shebaproc.FreeAddr(t),
		socket:   filepath.Join(dir, "haproxy.sock"),
		logs:     &shebaproc.Buffer{},
	}
	check := filepath.Join(dir, "grpc-check.sh")
	var script bytes.Buffer
	if err := grpcCheck.Execute(&script, map[string]any{"Probe": probe, "Timeout": checkTimeout / 2}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(check, script.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	type server struct {
		Name               string
		HTTPPort, GRPCPort string
	}
	var servers []server
	for _, r := range replicas {
		_, httpPort, _ := net.SplitHostPort(r.HTTPAddr)
		_, grpcPort, _ := net.SplitHostPort(r.GRPCAddr)
		servers = append(servers, server{r.name, httpPort, grpcPort})
	}
	_, restPort, _ := net.SplitHostPort(lb.restAddr)
	_, grpcPort, _ := net.SplitHostPort(lb.grpcAddr)
	var cfg bytes.Buffer
	if err := haproxyConfig.Execute(&cfg, map[string]any{
		"Socket": lb.socket, "Check": check,
		"Inter": checkInter, "Fall": checkFall, "Rise": checkRise, "CheckTimeout": checkTimeout,
		"RESTPort": restPort, "GRPCPort": grpcPort, "Replicas": servers,
	}); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfgFile, cfg.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(haproxy, "-c", "-q", "-f", cfgFile).CombinedOutput(); err != nil {
		t.Fatalf("haproxy rejects its config: %v\n%s\n%s", err, out, cfg.String())
	}
	cmd := exec.Command(haproxy, "-db", "-f", cfgFile)
	cmd.Stdout, cmd.Stderr = lb.logs, lb.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("haproxy log:\n%s", lb.logs.String())
		}
	})
	return lb
}

// stats returns HAProxy's statistics by "proxy/server" (servers, and
// FRONTEND and BACKEND rows) and column name.
func (lb *loadBalancer) stats(t *testing.T) map[string]map[string]string {
	t.Helper()
	stats, err := lb.readStats()
	if err != nil {
		t.Fatal(err)
	}
	return stats
}

func (lb *loadBalancer) readStats() (map[string]map[string]string, error) {
	conn, err := net.DialTimeout("unix", lb.socket, time.Second)
	if err != nil {
		return nil, fmt.Errorf("haproxy stats socket: %w", err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "show stat\n"); err != nil {
		return nil, fmt.Errorf("haproxy stats socket: %w", err)
	}
	raw, err := io.ReadAll(conn)
	if err != nil {
		return nil, fmt.Errorf("haproxy stats socket: %w", err)
	}
	rows, err := csv.NewReader(strings.NewReader(strings.TrimPrefix(string(raw), "# "))).ReadAll()
	if err != nil || len(rows) < 2 {
		return nil, fmt.Errorf("haproxy stats: %v\n%s", err, raw)
	}
	header := rows[0]
	out := map[string]map[string]string{}
	for _, row := range rows[1:] {
		m := map[string]string{}
		for i, name := range header {
			if i < len(row) {
				m[name] = row[i]
			}
		}
		out[m["pxname"]+"/"+m["svname"]] = m
	}
	return out, nil
}

// waitUp waits until HAProxy has the replica up in both backends.
func (lb *loadBalancer) waitUp(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Until HAProxy has started, the socket is not there yet.
		stats, err := lb.readStats()
		rest, grpcSt := stats["rest/"+name]["status"], stats["grpc/"+name]["status"]
		if rest == "UP" && grpcSt == "UP" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s not up in haproxy within 30s (rest %q, grpc %q, %v); haproxy log:\n%s", name, rest, grpcSt, err, lb.logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ------------------------------------------------------------------ load

// clients call sheba through the load balancer.
type clients struct {
	key  string
	rest *http.Client
	base string
	ping shebav1.PingServiceClient
	acct shebav1.AccountServiceClient
	seq  atomic.Int64 // numbers new usernames
}

func newClients(t *testing.T, lb *loadBalancer, key string) *clients {
	t.Helper()
	conn, err := grpc.NewClient(lb.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	transport := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(transport.CloseIdleConnections)
	return &clients{
		key:  key,
		rest: &http.Client{Transport: transport, Timeout: 15 * time.Second},
		base: "http://" + lb.restAddr,
		ping: shebav1.NewPingServiceClient(conn),
		acct: shebav1.NewAccountServiceClient(conn),
	}
}

func (c *clients) restCall(ctx context.Context, method, path, body string) ([]byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("x-api-key", c.key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.rest.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(b))
	}
	return b, nil
}

// createAccountREST creates an account and returns its id, or "" on error.
func (c *clients) createAccountREST(ctx context.Context, username string) string {
	b, err := c.restCall(ctx, http.MethodPost, "/v1/accounts", fmt.Sprintf(`{"username":%q,"password":"rollout-password"}`, username))
	if err != nil {
		return ""
	}
	var a struct{ ID string }
	if json.Unmarshal(b, &a) != nil {
		return ""
	}
	return a.ID
}

func (c *clients) grpcContext(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-api-key", c.key)
}

// result counts one kind of request.
type result struct {
	name       string
	ok, failed int64
	errors     []string // the first few
}

type load struct {
	stopc   chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	results []*result
}

// startLoad starts workers that call sheba through the load balancer until
// stop: reads (ping and GetAccount) and writes (CreateAccount) on REST and
// gRPC.
func startLoad(c *clients, accountID string) *load {
	l := &load{stopc: make(chan struct{})}
	kinds := []struct {
		name     string
		workers  int
		interval time.Duration
		call     func(ctx context.Context) error
	}{
		{"rest ping", 2, readInterval, func(ctx context.Context) error {
			b, err := c.restCall(ctx, http.MethodGet, "/v1/ping", "")
			if err == nil && !bytes.Contains(b, []byte("pong")) {
				err = fmt.Errorf("ping answered %s", b)
			}
			return err
		}},
		{"rest GetAccount", 2, readInterval, func(ctx context.Context) error {
			b, err := c.restCall(ctx, http.MethodGet, "/v1/accounts/"+accountID, "")
			if err == nil && !bytes.Contains(b, []byte(accountID)) {
				err = fmt.Errorf("GetAccount answered %s", b)
			}
			return err
		}},
		{"rest CreateAccount", 1, writeInterval, func(ctx context.Context) error {
			_, err := c.restCall(ctx, http.MethodPost, "/v1/accounts",
				fmt.Sprintf(`{"username":"rest-%d","password":"rollout-password"}`, c.seq.Add(1)))
			return err
		}},
		{"grpc Ping", 2, readInterval, func(ctx context.Context) error {
			_, err := c.ping.Ping(ctx, &shebav1.PingRequest{})
			return err
		}},
		{"grpc GetAccount", 2, readInterval, func(ctx context.Context) error {
			a, err := c.acct.GetAccount(c.grpcContext(ctx), &shebav1.GetAccountRequest{AccountId: accountID})
			if err == nil && a.GetAccount().GetId() != accountID {
				err = fmt.Errorf("GetAccount answered %v", a)
			}
			return err
		}},
		{"grpc CreateAccount", 1, writeInterval, func(ctx context.Context) error {
			_, err := c.acct.CreateAccount(c.grpcContext(ctx), &shebav1.CreateAccountRequest{
				Username: fmt.Sprintf("grpc-%d", c.seq.Add(1)), Password: "rollout-password"})
			return err
		}},
	}
	for _, k := range kinds {
		res := &result{name: k.name}
		l.results = append(l.results, res)
		for range k.workers {
			l.wg.Go(func() {
				tick := time.NewTicker(k.interval)
				defer tick.Stop()
				for range maxPerWorker {
					select {
					case <-l.stopc:
						return
					case <-tick.C:
					}
					// Not the test's context: a request under way when the
					// load stops still finishes and counts.
					ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
					err := k.call(ctx)
					cancel()
					l.mu.Lock()
					if err == nil {
						res.ok++
					} else {
						res.failed++
						if len(res.errors) < 5 {
							res.errors = append(res.errors, err.Error())
						}
					}
					l.mu.Unlock()
				}
			})
		}
	}
	return l
}

// stop ends the load, waits for requests under way, and returns the counts.
func (l *load) stop() []result {
	close(l.stopc)
	l.wg.Wait()
	var out []result
	for _, r := range l.results {
		out = append(out, *r)
	}
	return slices.Clip(out)
}
