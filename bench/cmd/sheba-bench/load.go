package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"

	"google.golang.org/protobuf/proto"
)

// result is what one load run measured.
type result struct {
	Requests int64   `json:"requests"`
	Seconds  float64 `json:"seconds"`
	RPS      float64 `json:"rps"`
	// OKPerSec is the rate of successful answers (HTTP 2xx, gRPC OK, pgbench
	// transactions that did not fail).
	OKPerSec float64 `json:"ok_per_sec"`
	P50ms    float64 `json:"p50_ms"`
	P90ms    float64 `json:"p90_ms"`
	P99ms    float64 `json:"p99_ms"`
	// LatencyOf says which answers the percentiles cover: "all" (wrk,
	// pgbench), "ok" (grpcload: non-OK calls are left out) or "2xx"
	// (httpload).
	LatencyOf string `json:"latency_of"`
	// Statuses counts answers by HTTP status, gRPC code name, or "ok" and
	// "failed" for pgbench.
	Statuses map[string]int64 `json:"statuses"`
	// SocketErrors counts requests that got no answer, by cause.
	SocketErrors map[string]int64 `json:"socket_errors,omitempty"`
	// ErrorMessages counts error texts where the generator reports them
	// (grpcload).
	ErrorMessages map[string]int64 `json:"error_messages,omitempty"`

	// CPULoadgen is the load generator's CPU time over the run's wall time.
	CPULoadgen float64 `json:"cpu_loadgen"`

	// Filled in by the driver around the run: the server process's peak
	// RSS; the CPU share of the server process plus Postgres (all of its
	// processes); how busy the two CPUs were, whoever used them.
	PeakRSSKiB    int64   `json:"peak_rss_kib,omitempty"`
	CPUServer     float64 `json:"cpu_server"`
	CPUServerSec  float64 `json:"cpu_server_seconds"`
	CPUServerCore float64 `json:"cpu_server_core_busy"`
	CPULoadCore   float64 `json:"cpu_loadgen_core_busy"`

	// With a hook server (hookMeter): the checks it answered during the
	// run, and its CPU, not counted in CPUServer.
	HookChecks int64   `json:"hook_checks,omitempty"`
	CPUHook    float64 `json:"cpu_hook,omitempty"`
	CPUHookSec float64 `json:"cpu_hook_seconds,omitempty"`

	// With a standby (side.standby): CPUServerSec in parts.
	CPUSplit *cpuSplit `json:"cpu_split,omitempty"`
}

// loadEnv is what every load generator needs to run.
type loadEnv struct {
	pin     pinner
	cpu     int // the load generator's CPU
	conc    int
	dir     string // scratch folder of the run
	timeout time.Duration
}

// load is one side's load generator, configured for a scenario.
type load interface {
	// run sends load for d and reports what it measured.
	run(ctx context.Context, env loadEnv, d time.Duration) (result, error)
	// tool names the generator in the table.
	tool() string
}

// execLoad runs argv pinned to the load generator's CPU, bounded by d plus a
// margin, and returns its stdout; what it printed on stderr goes to
// dir/loadgen.log, and its tail into the error when it fails.
func execLoad(ctx context.Context, env loadEnv, d time.Duration, dir string, argv ...string) (execOut, error) {
	ctx, cancel := context.WithTimeout(ctx, d+env.timeout)
	defer cancel()
	argv = env.pin.command(env.cpu, argv...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	if stderr.Len() > 0 {
		if f, ferr := os.OpenFile(filepath.Join(env.dir, "loadgen.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); ferr == nil {
			fmt.Fprintf(f, "== %s\n%s\n", strings.Join(argv, " "), stderr.Bytes())
			f.Close()
		}
	}
	if err != nil {
		return execOut{}, fmt.Errorf("%s: %v\n%s%s", filepath.Base(argv[0]), err, lastLines(stdout.String(), 10), lastLines(stderr.String(), 10))
	}
	// taskset execs the generator, so this is the generator's own CPU time.
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return execOut{stdout: stdout.Bytes(), cpu: cpu.Seconds() / wall.Seconds()}, nil
}

// execOut is what a load generator printed and the share of one CPU it used.
type execOut struct {
	stdout []byte
	cpu    float64
}

// ---------------------------------------------------------------- wrk

//go:embed wrk.lua
var wrkLua string

var wrkTemplate = template.Must(template.New("wrk.lua").Funcs(template.FuncMap{"lua": luaString}).Parse(wrkLua))

// luaString quotes s as a Lua string literal, every byte that is not
// printable ASCII (or is a quote or backslash) as a decimal escape, which
// every Lua reads alike: a body may hold any byte (gRPC-Web's frame header
// is zeros).
func luaString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := range len(s) {
		if c := s[i]; c >= ' ' && c <= '~' && c != '"' && c != '\\' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "\\%03d", c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// wrkScript is what wrk.lua is filled with.
type wrkScript struct {
	Method  string
	Path    string
	Headers map[string]string
	Body    string
	// IDsFile, when set, makes each request's path PathPrefix + a random
	// line of the file + PathSuffix.
	IDsFile    string
	PathPrefix string
	PathSuffix string
}

// wrkLoad drives HTTP with wrk: one thread, conc keep-alive connections,
// each with one request in flight.
type wrkLoad struct {
	bin     string
	baseURL string // http://127.0.0.1:PORT
	script  wrkScript
}

func (w wrkLoad) tool() string { return "wrk" }

func (w wrkLoad) run(ctx context.Context, env loadEnv, d time.Duration) (result, error) {
	f, err := os.CreateTemp(env.dir, "wrk-*.lua")
	if err != nil {
		return result{}, err
	}
	err = wrkTemplate.Execute(f, w.script)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return result{}, err
	}
	defer os.Remove(f.Name())
	secs := int(math.Ceil(d.Seconds()))
	x, err := execLoad(ctx, env, d, env.dir, w.bin, "-t1", "-c"+strconv.Itoa(env.conc), "-d"+strconv.Itoa(secs)+"s",
		"--timeout", "10s", "-s", f.Name(), w.baseURL+w.script.Path)
	if err != nil {
		return result{}, err
	}
	r, err := parseWrk(x.stdout)
	r.CPULoadgen = x.cpu
	return r, err
}

// parseWrk reads the BENCHJSON line that wrk.lua's done() prints.
func parseWrk(out []byte) (result, error) {
	var line string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "BENCHJSON "); ok {
			line = rest
		}
	}
	if line == "" {
		return result{}, fmt.Errorf("wrk printed no BENCHJSON line:\n%s", lastLines(string(out), 20))
	}
	var w struct {
		Requests     int64            `json:"requests"`
		DurationUS   int64            `json:"duration_us"`
		P50US        float64          `json:"p50_us"`
		P90US        float64          `json:"p90_us"`
		P99US        float64          `json:"p99_us"`
		SocketErrors map[string]int64 `json:"socket_errors"`
		Statuses     map[string]int64 `json:"statuses"`
	}
	if err := json.Unmarshal([]byte(line), &w); err != nil {
		return result{}, fmt.Errorf("wrk output: %w: %s", err, line)
	}
	r := result{
		Requests:  w.Requests,
		Seconds:   float64(w.DurationUS) / 1e6,
		P50ms:     w.P50US / 1e3,
		P90ms:     w.P90US / 1e3,
		P99ms:     w.P99US / 1e3,
		LatencyOf: "all",
		Statuses:  w.Statuses,
	}
	if r.Statuses == nil {
		r.Statuses = map[string]int64{}
	}
	for k, v := range w.SocketErrors {
		if v > 0 {
			if r.SocketErrors == nil {
				r.SocketErrors = map[string]int64{}
			}
			r.SocketErrors[k] = v
		}
	}
	if r.Seconds > 0 {
		r.RPS = float64(r.Requests) / r.Seconds
		r.OKPerSec = float64(countRange(r.Statuses, 200, 299)) / r.Seconds
	}
	return r, nil
}

// countRange adds up the counts of HTTP statuses lo..hi.
func countRange(statuses map[string]int64, lo, hi int) int64 {
	var n int64
	for k, v := range statuses {
		if s, err := strconv.Atoi(k); err == nil && s >= lo && s <= hi {
			n += v
		}
	}
	return n
}

// ---------------------------------------------------------------- grpcload

// grpcLoad runs this binary's grpcload subcommand (see grpcload.go): conc
// workers over conns connections (one, as a typical client), unary calls,
// each worker with one call in flight.
type grpcLoad struct {
	self     string
	addr     string
	method   string        // "/package.Service/Method"
	request  proto.Message // encoded once, here
	metadata map[string]string
	conns    int
}

func (g grpcLoad) tool() string { return "grpcload (Go)" }

func (g grpcLoad) run(ctx context.Context, env loadEnv, d time.Duration) (result, error) {
	req, err := proto.Marshal(g.request)
	if err != nil {
		return result{}, err
	}
	argv := []string{g.self, "grpcload", "-addr", g.addr, "-method", g.method,
		"-request", base64.StdEncoding.EncodeToString(req), "-conns", strconv.Itoa(max(g.conns, 1)),
		"-c", strconv.Itoa(env.conc), "-d", d.String(), "-timeout", "10s"}
	return execGoLoad(ctx, env, d, argv, g.metadata)
}

// ---------------------------------------------------------------- pgbench

// pgbenchLoad runs a pgbench script: conc clients, one pgbench thread,
// prepared statements (as pgx's statement cache), over TCP like sheba.
type pgbenchLoad struct {
	bin    string
	script string // path of the script
	port   int
	db     string
}

func (p pgbenchLoad) tool() string { return "pgbench" }

func (p pgbenchLoad) run(ctx context.Context, env loadEnv, d time.Duration) (result, error) {
	dir, err := os.MkdirTemp(env.dir, "pgbench-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	secs := int(math.Ceil(d.Seconds()))
	// The per-transaction log (-l) gives the percentiles; a 10% sample keeps
	// its writing cheap and is still thousands of samples.
	x, err := execLoad(ctx, env, d, dir, p.bin, "-n", "-M", "prepared", "-f", p.script,
		"-c", strconv.Itoa(env.conc), "-j", "1", "-T", strconv.Itoa(secs), "-l", "--sampling-rate=0.1",
		"-h", "127.0.0.1", "-p", strconv.Itoa(p.port), "-U", "postgres", p.db)
	if err != nil {
		return result{}, err
	}
	r, err := parsePgbench(x.stdout)
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(env.dir, "loadgen.log"))
		return result{}, fmt.Errorf("%w\nits stderr (loadgen.log) ends:\n%s", err, lastLines(string(log), 10))
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "pgbench_log.*"))
	var lats []time.Duration
	for _, l := range logs {
		f, err := os.Open(l)
		if err != nil {
			return result{}, err
		}
		lats = append(lats, parsePgbenchLog(f)...)
		f.Close()
	}
	r.P50ms, r.P90ms, r.P99ms = percentileMs(lats, 50), percentileMs(lats, 90), percentileMs(lats, 99)
	r.CPULoadgen = x.cpu
	return r, nil
}

var (
	pgbenchProcessed = regexp.MustCompile(`number of transactions actually processed: (\d+)`)
	pgbenchFailed    = regexp.MustCompile(`number of failed transactions: (\d+)`)
	pgbenchTPS       = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
)

// parsePgbench reads pgbench's summary. Requests/s is its tps without the
// initial connection time.
func parsePgbench(out []byte) (result, error) {
	m := pgbenchProcessed.FindSubmatch(out)
	t := pgbenchTPS.FindSubmatch(out)
	if m == nil || t == nil {
		return result{}, fmt.Errorf("pgbench output not understood:\n%s", lastLines(string(out), 20))
	}
	processed, _ := strconv.ParseInt(string(m[1]), 10, 64)
	tps, _ := strconv.ParseFloat(string(t[1]), 64)
	var failed int64
	if f := pgbenchFailed.FindSubmatch(out); f != nil {
		failed, _ = strconv.ParseInt(string(f[1]), 10, 64)
	}
	r := result{
		Requests:  processed + failed,
		RPS:       tps,
		LatencyOf: "all",
		Statuses:  map[string]int64{"ok": processed},
	}
	if failed > 0 {
		r.Statuses["failed"] = failed
	}
	if tps > 0 {
		r.Seconds = float64(processed) / tps
		r.OKPerSec = tps
	}
	return r, nil
}

// parsePgbenchLog reads the latencies of a pgbench per-transaction log:
// "client_id transaction_no time script_no time_epoch time_us ...", time
// in microseconds (or a word for a failed transaction, skipped).
func parsePgbenchLog(r io.Reader) []time.Duration {
	var lats []time.Duration
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		us, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			continue
		}
		lats = append(lats, time.Duration(us)*time.Microsecond)
	}
	return lats
}

// ---------------------------------------------------------------- httpload

// goLoad runs this binary's httpload subcommand (see httpload.go).
type goLoad struct {
	self    string
	url     string
	method  string
	body    string
	headers map[string]string
}

func (g goLoad) tool() string { return "httpload (Go)" }

func (g goLoad) run(ctx context.Context, env loadEnv, d time.Duration) (result, error) {
	argv := []string{g.self, "httpload", "-url", g.url, "-method", g.method, "-body", g.body,
		"-c", strconv.Itoa(env.conc), "-d", d.String()}
	return execGoLoad(ctx, env, d, argv, g.headers)
}

// execGoLoad runs one of this binary's load subcommands (argv: the binary,
// the subcommand, its flags) with headers as -H flags in name order, and
// reads the result JSON it prints.
func execGoLoad(ctx context.Context, env loadEnv, d time.Duration, argv []string, headers map[string]string) (result, error) {
	for _, k := range slices.Sorted(maps.Keys(headers)) {
		argv = append(argv, "-H", k+": "+headers[k])
	}
	x, err := execLoad(ctx, env, d, env.dir, argv...)
	if err != nil {
		return result{}, err
	}
	var r result
	if err := json.Unmarshal(x.stdout, &r); err != nil {
		return result{}, fmt.Errorf("%s output: %w", argv[1], err)
	}
	r.CPULoadgen = x.cpu
	return r, nil
}

// ---------------------------------------------------------------- helpers

// percentileMs is the p-th percentile (nearest rank) of lats in
// milliseconds, or 0 for none. It sorts lats.
func percentileMs(lats []time.Duration, p float64) float64 {
	if len(lats) == 0 {
		return 0
	}
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	rank := int(math.Ceil(p / 100 * float64(len(lats))))
	rank = min(max(rank, 1), len(lats))
	return float64(lats[rank-1]) / float64(time.Millisecond)
}
