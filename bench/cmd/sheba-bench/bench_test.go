package main

import (
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alexedwards/argon2id"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/shebasvc/sheba/config"
)

func TestBenchPasswordHash(t *testing.T) {
	ok, err := argon2id.ComparePasswordAndHash(benchPassword, benchPasswordHash)
	if err != nil || !ok {
		t.Fatalf("benchPasswordHash does not verify benchPassword: ok=%v, err=%v", ok, err)
	}
	params, _, _, err := argon2id.DecodeHash(benchPasswordHash)
	if err != nil {
		t.Fatal(err)
	}
	// sheba's parameters for new hashes (server/password.go): a login of a
	// seeded account must cost what a real one does.
	if params.Memory != 19*1024 || params.Iterations != 2 || params.Parallelism != 1 {
		t.Errorf("hash params m=%d t=%d p=%d, want m=19456 t=2 p=1", params.Memory, params.Iterations, params.Parallelism)
	}
}

func TestAccountID(t *testing.T) {
	for _, n := range []int{1, 42, 10000, 999_999} {
		id := accountID(n)
		if _, err := uuid.Parse(id); err != nil {
			t.Errorf("accountID(%d) = %q: %v", n, id, err)
		}
		// What seed's SQL and the pgbench script build:
		// prefix || lpad(n::text, 12, '0').
		n12 := strings.Repeat("0", 12-len(strconv.Itoa(n))) + strconv.Itoa(n)
		if want := accountIDPrefix + n12; id != want {
			t.Errorf("accountID(%d) = %q, want %q", n, id, want)
		}
	}
	script := pgbenchScript(10000)
	for _, want := range []string{
		`\set n random(1, 10000)`,
		"SELECT id, account_id, plan, status, create_time, cancel_time FROM subscriptions WHERE account_id = ",
		"AND status = 'active';",
	} {
		if !strings.Contains(script, want) {
			t.Errorf("pgbench script lacks %q:\n%s", want, script)
		}
	}
}

// TestShebaYAML loads the config the driver writes with sheba's own loader,
// so a change of the config's keys breaks this test rather than `make bench`.
func TestShebaYAML(t *testing.T) {
	key := newAPIKey()
	for _, k := range []*apiKey{&key, nil} {
		path := filepath.Join(t.TempDir(), "sheba.yaml")
		if err := os.WriteFile(path, []byte(shebaYAML(18080, 19090, k)), 0o600); err != nil {
			t.Fatal(err)
		}
		env := map[string]string{
			"DATABASE_URL":              "postgres://postgres@127.0.0.1:5432/sheba?sslmode=disable",
			"SHEBA_LIMITS_MAX_INFLIGHT": "4",
			"SHEBA_LOG_LEVEL":           "warn",
		}
		cfg, err := config.Load(path, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		if err != nil {
			t.Fatalf("config.Load: %v", err)
		}
		if cfg.HTTP.Addr != "127.0.0.1:18080" || cfg.GRPC.Addr != "127.0.0.1:19090" {
			t.Errorf("addrs %q %q, want 127.0.0.1:18080 and 127.0.0.1:19090", cfg.HTTP.Addr, cfg.GRPC.Addr)
		}
		if cfg.Limits.MaxInflight != 4 || cfg.Log.Level != "warn" {
			t.Errorf("max_inflight %d, log level %q: want the environment's 4 and warn", cfg.Limits.MaxInflight, cfg.Log.Level)
		}
		wantKeys := 0
		if k != nil {
			wantKeys = 1
			if cfg.Auth.Keys[0].SHA256 != key.sha256 {
				t.Errorf("auth key sha256 %q, want %q", cfg.Auth.Keys[0].SHA256, key.sha256)
			}
		}
		if len(cfg.Auth.Keys) != wantKeys {
			t.Errorf("%d auth keys, want %d", len(cfg.Auth.Keys), wantKeys)
		}
	}
}

// TestShebaYAMLEventKeys: the event rows' sheba, with their keys beside
// the bench's and the stream limits in its environment, loads.
func TestShebaYAMLEventKeys(t *testing.T) {
	key, more := newAPIKey(), []apiKey{newAPIKey(), newAPIKey()}
	more[0].id, more[1].id = "bench-stream-1", "bench-stream-2"
	path := filepath.Join(t.TempDir(), "sheba.yaml")
	if err := os.WriteFile(path, []byte(shebaYAML(18080, 19090, &key, more...)), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"DATABASE_URL":                     "postgres://postgres@127.0.0.1:5432/sheba?sslmode=disable",
		"SHEBA_EVENTS_MAX_STREAMS":         "1000",
		"SHEBA_EVENTS_MAX_STREAMS_PER_KEY": "10",
		"SHEBA_LIMITS_MAX_CONNECTIONS":     "1064",
	}
	cfg, err := config.Load(path, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("config.Load: %v", err)
	}
	var got []string
	for _, k := range cfg.Auth.Keys {
		got = append(got, k.SHA256)
	}
	if diff := cmp.Diff([]string{key.sha256, more[0].sha256, more[1].sha256}, got); diff != "" {
		t.Errorf("auth keys' sha256 (-want +got):\n%s", diff)
	}
	if cfg.Events.MaxStreams != 1000 || cfg.Events.MaxStreamsPerKey != 10 || cfg.Limits.MaxConnections != 1064 {
		t.Errorf("events max_streams %d, max_streams_per_key %d, limits.max_connections %d: want the environment's 1000, 10 and 1064",
			cfg.Events.MaxStreams, cfg.Events.MaxStreamsPerKey, cfg.Limits.MaxConnections)
	}
}

// TestEventFigures: the CPU per delivery is what the streams add over the
// writes alone; the memory per stream is the growth over the streams.
func TestEventFigures(t *testing.T) {
	r := eventResult{Streams: 1000, Written: map[string]int{"subscription.created": 500, "account.created": 500},
		Expected: 250_000, Delivered: 250_000, CommitP99Ms: 400}
	m := eventMeasure{rssBeforeKiB: 60 * 1024, rssOpenKiB: 60*1024 + 32_000, wall: 5 * time.Second,
		shebaSec: 2, writesAloneSec: 1, writtenAlone: 1000}
	got := map[string]float64{}
	for _, f := range eventFigures(r, m) {
		if _, ok := got[f.Name]; !ok {
			got[f.Name] = f.Value
		}
		if f.Met != nil && !*f.Met {
			t.Errorf("%s: goal missed", f)
		}
	}
	for name, want := range map[string]float64{
		// (2 s - 1000 writes x 1 ms) / 250,000 deliveries.
		"sheba's CPU per delivered event, the writes' own cost taken off": 4,
		"RSS per open stream": 32,
		"deliveries/s":        50_000,
	} {
		if got[name] != want {
			t.Errorf("%s: got %v, want %v", name, got[name], want)
		}
	}
}

// TestHookEnv loads the hooked sheba's environment with sheba's own
// loader, as TestShebaYAML does the config file.
func TestHookEnv(t *testing.T) {
	env := map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:5432/sheba?sslmode=disable"}
	for _, kv := range hookEnv(config.HookExtAuthz, "grpc://127.0.0.1:19091") {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	cfg, err := config.Load("", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("config.Load: %v", err)
	}
	want := config.Hook{URL: "grpc://127.0.0.1:19091", Protocol: config.HookExtAuthz, Timeout: time.Second, FailureMode: config.HookFailClosed}
	got := cfg.Hook
	got.Methods, got.SendBody, got.Headers, got.CacheEntries = nil, false, nil, 0
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hook config (-want +got):\n%s", diff)
	}
	// The cached row needs a cache; every row needs every business call.
	if cfg.Hook.CacheEntries == 0 || len(cfg.Hook.Methods) != 0 {
		t.Errorf("hook cache_entries %d, methods %q: want the defaults (a cache, every method)", cfg.Hook.CacheEntries, cfg.Hook.Methods)
	}
}

func TestWrkScript(t *testing.T) {
	var b strings.Builder
	err := wrkTemplate.Execute(&b, wrkScript{
		Method: "POST", Path: "/v1/accounts", Body: `{"username":"x"}`,
		Headers: map[string]string{"Content-Type": "application/json", "x-api-key": "k"},
		IDsFile: "/tmp/ids", PathPrefix: "/v1/accounts/", PathSuffix: "/subscription",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`wrk.method = "POST"`,
		`wrk.headers["x-api-key"] = "k"`,
		`wrk.body = "{\034username\034:\034x\034}"`,
		`io.lines("/tmp/ids")`,
		`"/v1/accounts/" .. ids[math.random(#ids)] .. "/subscription"`,
		"function response(status, headers, body)",
		"BENCHJSON",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("script lacks %q:\n%s", want, b.String())
		}
	}
}

func TestLuaString(t *testing.T) {
	// gRPC-Web's empty frame, a quote, a backslash, a letter.
	if got, want := luaString("\x00\x00\"\\a"), `"\000\000\034\092a"`; got != want {
		t.Errorf("luaString: got %s, want %s", got, want)
	}
}

func TestParseWrk(t *testing.T) {
	out := []byte(`Running 5s test @ http://127.0.0.1:1/v1/ping
  1 threads and 50 connections
Requests/sec:  20000.00
BENCHJSON {"requests":100000,"duration_us":5000000,"p50_us":1900,"p90_us":3000,"p99_us":14000,"max_us":50000,"socket_errors":{"connect":0,"read":2,"write":0,"timeout":0},"statuses":{"200":99990,"429":10}}
`)
	got, err := parseWrk(out)
	if err != nil {
		t.Fatal(err)
	}
	want := result{
		Requests: 100000, Seconds: 5, RPS: 20000, OKPerSec: 19998,
		P50ms: 1.9, P90ms: 3, P99ms: 14, LatencyOf: "all",
		Statuses:     map[string]int64{"200": 99990, "429": 10},
		SocketErrors: map[string]int64{"read": 2},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseWrk (-want +got):\n%s", diff)
	}
	if _, err := parseWrk([]byte("no json here")); err == nil {
		t.Error("parseWrk of output without BENCHJSON: got no error")
	}
}

func TestParsePgbench(t *testing.T) {
	out := []byte(`pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: /tmp/get-subscription.pgbench
scaling factor: 1
query mode: prepared
number of clients: 50
number of threads: 1
maximum number of tries: 1
duration: 5 s
number of transactions actually processed: 100000
number of failed transactions: 0 (0.000%)
latency average = 2.500 ms
initial connection time = 40.000 ms
tps = 20000.000000 (without initial connection time)
`)
	got, err := parsePgbench(out)
	if err != nil {
		t.Fatal(err)
	}
	want := result{Requests: 100000, Seconds: 5, RPS: 20000, OKPerSec: 20000, LatencyOf: "all", Statuses: map[string]int64{"ok": 100000}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parsePgbench (-want +got):\n%s", diff)
	}
	log := "0 1 1500 0 1764500000 123456\n1 1 2500 0 1764500000 123999\n2 7 failed 0 1764500001 1\n"
	lats := parsePgbenchLog(strings.NewReader(log))
	if diff := cmp.Diff([]time.Duration{1500 * time.Microsecond, 2500 * time.Microsecond}, lats); diff != "" {
		t.Errorf("parsePgbenchLog (-want +got):\n%s", diff)
	}
}

func TestPercentileAndMedian(t *testing.T) {
	var lats []time.Duration
	for i := 100; i >= 1; i-- {
		lats = append(lats, time.Duration(i)*time.Millisecond)
	}
	for p, want := range map[float64]float64{50: 50, 99: 99, 100: 100, 1: 1} {
		if got := percentileMs(lats, p); got != want {
			t.Errorf("percentileMs(1..100 ms, %v) = %v, want %v", p, got, want)
		}
	}
	if got := percentileMs(nil, 50); got != 0 {
		t.Errorf("percentileMs(nil) = %v, want 0", got)
	}
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	s := scenarioReport{Sides: []sideReport{
		{Label: "sheba", Expect: []string{"200"}, Runs: []result{
			{RPS: 100, P99ms: 2, Statuses: map[string]int64{"200": 500, "503": 1}, PeakRSSKiB: 10, Requests: 500, CPUServerSec: 1},
			{RPS: 90, P99ms: 4, Statuses: map[string]int64{"200": 450}, PeakRSSKiB: 30, Requests: 450, CPUServerSec: 0.9},
			{RPS: 120, P99ms: 3, Statuses: map[string]int64{"200": 600}, SocketErrors: map[string]int64{"read": 2}, PeakRSSKiB: 20, Requests: 600, CPUServerSec: 1.8},
		}},
		{Label: "base", Expect: []string{"200"}, Runs: []result{
			{RPS: 200, P99ms: 1, Requests: 1000, CPUServerSec: 1},
			{RPS: 100, P99ms: 1, Requests: 500, CPUServerSec: 0.5},
			{RPS: 150, P99ms: 1, Requests: 750, CPUServerSec: 0.75},
		}},
	}}
	s.summarize()
	a := s.Sides[0].Summary
	if a.Rate != 100 || a.P99ms != 3 || a.PeakRSSKiB != 30 {
		t.Errorf("sheba summary rate %v p99 %v rss %v, want 100 3 30", a.Rate, a.P99ms, a.PeakRSSKiB)
	}
	if diff := cmp.Diff(map[string]int64{"503": 1, "read": 2}, a.Errors); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
	// Pairs: 100/200, 90/100, 120/150 -> 0.5, 0.9, 0.8.
	if math.Abs(s.Ratio-0.8) > 1e-9 {
		t.Errorf("ratio %v, want 0.8 (median of 0.5, 0.9, 0.8)", s.Ratio)
	}
	// CPU per request: 2, 2, 3 ms against 1 ms each.
	if math.Abs(s.CPURatio-2) > 1e-9 || math.Abs(a.CPUPerReqUS-2000) > 1e-6 {
		t.Errorf("CPU per request %v µs, ratio %v; want 2000 µs and 2", a.CPUPerReqUS, s.CPURatio)
	}
}

func TestHookFigures(t *testing.T) {
	// Two pairs: sheba with the hook at 50 and 60 µs of CPU a request, p50
	// 1.2 and 1.4 ms, p99 3 and 5 ms; without it 20 µs, 1 ms, 2 ms.
	sr := scenarioReport{Sides: []sideReport{
		{Label: "hooked", HookServer: srvHookEcho, Expect: []string{"200"}, Runs: []result{
			{RPS: 800, Requests: 1000, CPUServerSec: 0.05, P50ms: 1.2, P99ms: 3, HookChecks: 1010, CPUHook: 0.2, CPUHookSec: 0.01},
			{RPS: 700, Requests: 1000, CPUServerSec: 0.06, P50ms: 1.4, P99ms: 5, HookChecks: 1030, CPUHook: 0.3, CPUHookSec: 0.012},
		}},
		{Label: "unhooked", Expect: []string{"200"}, Runs: []result{
			{RPS: 1000, Requests: 2000, CPUServerSec: 0.04, P50ms: 1, P99ms: 2},
			{RPS: 1000, Requests: 2000, CPUServerSec: 0.04, P50ms: 1, P99ms: 2},
		}},
	}}
	sr.summarize()
	sr.Name = "hook-echo"
	sr.Figures = scenario{added: true}.figures(sr)
	rep := report{Scenarios: []scenarioReport{sr}}
	rep.judgeAll()
	sr = rep.Scenarios[0]
	var got []string
	for _, f := range sr.Figures {
		got = append(got, f.String())
	}
	// hook-echo's goals (goals) come first.
	want := []string{
		"ratio 0.75 (goal ≥ 0.75 ✓)", "moonshot 0.75 (goal ≥ 0.85 ✗)",
		"added CPU/req 35 µs", "added p50 0.30 ms", "added p99 2 ms",
		"hook server CPU/req 11 µs", "hook checks/req 1.02",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("figures (-want +got):\n%s", diff)
	}
	if sr.Sides[1].Summary.Hook != nil {
		t.Errorf("unhooked side has a hook summary: %+v", sr.Sides[1].Summary.Hook)
	}
	note := "hook-echo: " + strings.Join(want, "; ")
	if n := notes(rep); !slices.Contains(n, note) {
		t.Errorf("notes %q lack %q", n, note)
	}
}

func TestParseProc(t *testing.T) {
	hwm, err := parseVmHWM(strings.NewReader("Name:\tsheba\nVmPeak:\t 100 kB\nVmHWM:\t   25600 kB\nVmRSS:\t 20000 kB\n"))
	if err != nil || hwm != 25600 {
		t.Errorf("parseVmHWM = %v, %v; want 25600", hwm, err)
	}
	a := parseCPUTimes([]byte("cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 100 0 0 100 0 0 0 0 0 0\ncpu1 10 0 0 190 0 0 0 0 0 0\n"))
	b := parseCPUTimes([]byte("cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 190 0 0 110 0 0 0 0 0 0\ncpu1 20 0 0 280 0 0 0 0 0 0\n"))
	if got := busy(a, b, 0); math.Abs(got-0.9) > 1e-9 {
		t.Errorf("busy cpu0 = %v, want 0.9", got)
	}
	if got := busy(a, b, 1); math.Abs(got-0.1) > 1e-9 {
		t.Errorf("busy cpu1 = %v, want 0.1", got)
	}
	ppid, self, children, err := parseProcStat([]byte("4242 (post gres) S 4000 4242 4242 0 -1 4194560 500 0 0 0 250 50 7 3 20 0 1 0 100 1000 10"))
	if err != nil || ppid != 4000 || self != 300 || children != 10 {
		t.Errorf("parseProcStat = %d %d %d %v, want 4000 300 10", ppid, self, children, err)
	}
	if got := busy(a, b, 7); got != -1 {
		t.Errorf("busy of a missing CPU = %v, want -1", got)
	}
}

func TestParseOptions(t *testing.T) {
	o, err := parseOptions([]string{"-scenario", "ping-rest,readyz", "-pairs", "2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"ping-rest", "readyz"}, o.scenarios); diff != "" {
		t.Errorf("scenarios (-want +got):\n%s", diff)
	}
	for _, args := range [][]string{{"-scenario", "nope"}, {"-d", "1500ms"}, {"-pairs", "0"}, {"extra"}} {
		if _, err := parseOptions(args, io.Discard); err == nil {
			t.Errorf("parseOptions(%q): got no error", args)
		}
	}
	if d := budget(options{pairs: 3, duration: 5 * time.Second, warmup: 2 * time.Second}, 7); d != 238*time.Second {
		t.Errorf("budget of 7 default scenarios = %v, want 3m58s", d)
	}
}

func TestWebhookFigures(t *testing.T) {
	for _, test := range []struct {
		f    figure
		want string
	}{
		{fig("delivered/s", 397.4, ""), "delivered/s 397"},
		{goalFig("ratio", 0.8, "", ">=", 0.8), "ratio 0.80 (goal ≥ 0.80 ✓)"},
		{goalFig("drain", 31.5, " s", "<=", 30), "drain 31.5 s (goal ≤ 30 s ✗)"},
		{goalFig("duplicates", 0, "", "==", 0), "duplicates 0 (goal = 0 ✓)"},
		{goalFig("delivered", 19999, "", "==", 20000), "delivered 19,999 (goal = 20,000 ✗)"},
	} {
		if got := test.f.String(); got != test.want {
			t.Errorf("got %q, want %q", got, test.want)
		}
	}
	table := renderWebhookTable([]figureRow{{Name: "outage", About: "down 60s", Seconds: 90.4, Figures: []figure{
		goalFig("a", 1, "", "<=", 1), goalFig("b", 2, "", "<=", 1), fig("c", 3, ""),
	}}})
	if want := "| outage: down 60s | a 1 (goal ≤ 1 ✓); b 2 (goal ≤ 1 ✗); c 3 | 1 of 2 | 1m30s |\n"; !strings.HasSuffix(table, want) {
		t.Errorf("table:\n%s\nwant it to end in\n%s", table, want)
	}
}
