package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shebasvc/sheba/e2e/shebaproc"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// The operator pack's rules (deploy/prometheus/rules.yaml, docs/alerts.md)
// in a real Prometheus.

// promServer is Debian's Prometheus, run for one test.
type promServer struct {
	url  string
	logs *shebaproc.Buffer
}

// startPrometheus runs Prometheus on 127.0.0.1 with the operator pack's
// rules, scraping target's /metrics as job sheba and evaluating the rules
// every second, and waits until it is ready. It is killed when the test
// ends.
func startPrometheus(t *testing.T, target string) *promServer {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("prometheus not found: install it (Debian: apt-get install prometheus; make test does)")
	}
	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(config, fmt.Appendf(nil, `global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: sheba
    static_configs:
      - targets: [%q]
`, rules, target), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := shebaproc.FreeAddr(t)
	p := &promServer{url: "http://" + addr, logs: &shebaproc.Buffer{}}
	cmd := exec.Command(bin,
		"--config.file="+config,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn")
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("prometheus log:\n%s", p.logs)
		}
	})

	client := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		select {
		case <-exited:
			t.Fatalf("prometheus exited before it was ready; log:\n%s", p.logs)
		default:
		}
		if resp, err := client.Get(p.url + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready within 20s; log:\n%s", p.logs)
		}
	}
}

// promSample is one series of an instant query's answer.
type promSample struct {
	Metric map[string]string
	Value  float64
}

// query runs an instant query and returns its series.
func (p *promServer) query(t *testing.T, q string) []promSample {
	t.Helper()
	resp, err := http.Get(p.url + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string
		Error  string
		Data   struct {
			Result []struct {
				Metric map[string]string
				Value  [2]any // time, value as a string
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	if body.Status != "success" {
		t.Fatalf("query %s: %s: %s", q, body.Status, body.Error)
	}
	var samples []promSample
	for _, r := range body.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("query %s: value %v: %v", q, r.Value[1], err)
		}
		samples = append(samples, promSample{Metric: r.Metric, Value: v})
	}
	return samples
}

// waitForSeries polls q until it returns a series, at most d, and returns
// them.
func (p *promServer) waitForSeries(t *testing.T, d time.Duration, q string) []promSample {
	t.Helper()
	var got []promSample
	waitFor(t, d, "a series of "+q, func() bool {
		got = p.query(t, q)
		if len(got) == 0 {
			time.Sleep(200 * time.Millisecond)
		}
		return len(got) > 0
	})
	return got
}

// TestPrometheusRules loads the operator pack's rules into Debian's
// Prometheus, scraping a real sheba every second under steady calls: the
// RED recordings get series, the SLO ratios too, and no alert fires. Once
// the database is cut away, ShebaDatabaseDown and ShebaNotReady turn
// pending (they fire only after their for: 1m and 5m, longer than a test
// should take).
func TestPrometheusRules(t *testing.T) {
	t.Parallel()
	rewrite, proxy := viaProxy(t)
	e := startTestEnv(t, envSetup{poolURL: rewrite})
	waitFor(t, 10*time.Second, "ready at start", func() bool { return e.readiness(t).ready() })

	// Calls until the test ends: Ping, and a GetAccount answered NotFound
	// (Unavailable once the database is gone).
	ctx, stop := context.WithCancel(t.Context())
	var calls sync.WaitGroup
	calls.Go(func() {
		for ctx.Err() == nil {
			_, _ = e.ping.Ping(ctx, &shebav1.PingRequest{})
			_, _ = e.account.GetAccount(ctx, &shebav1.GetAccountRequest{AccountId: "00000000-0000-4000-8000-000000000000"})
			time.Sleep(50 * time.Millisecond)
		}
	})
	t.Cleanup(func() {
		stop()
		calls.Wait()
	})

	prom := startPrometheus(t, e.httpAddr)
	const bound = 30 * time.Second
	for _, q := range []string{
		`job_method:sheba_requests:rate5m{job="sheba",method="/sheba.v1.PingService/Ping"} > 0`,
		`job_method:sheba_requests_errors:ratio_rate5m{job="sheba",method="/sheba.v1.AccountService/GetAccount"} == 0`,
		`job_method:grpc_server_handling_seconds:p99_rate5m{job="sheba",method="/sheba.v1.PingService/Ping"} > 0`,
		`job:sheba_requests_errors:ratio_rate5m{job="sheba"} == 0`,
		`job:grpc_server_handling_slow:ratio_rate3d{job="sheba"} >= 0`,
		`sheba_database_up{job="sheba"} == 1`,
	} {
		got := prom.waitForSeries(t, bound, q)
		t.Logf("%s: %v", q, got)
	}
	if got := prom.query(t, `ALERTS`); len(got) > 0 {
		t.Errorf("alerts while all is well: %v", got)
	}

	(*proxy).cut()
	for _, alert := range []string{"ShebaDatabaseDown", "ShebaNotReady"} {
		got := prom.waitForSeries(t, bound, `ALERTS{alertname="`+alert+`",alertstate="pending",job="sheba"}`)
		t.Logf("%s: %v", alert, got)
	}
}
