package main

// The rows of sheba's external request hook (interceptors/hook): sheba with
// a hook that answers at once, bench/baseline/hookecho, against the same
// sheba without one (bench/README.md).

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/shebasvc/sheba/config"
)

// hookedShebas are the hooked sheba processes: the hook server each calls,
// the protocol, and the hook URL on that server.
var hookedShebas = map[string]struct {
	hook, protocol string
	url            func(hook *server) string
}{
	srvShebaHook:       {srvHookEcho, config.HookHTTP, hookHTTPURL},
	srvShebaHookCached: {srvHookEchoCached, config.HookHTTP, hookHTTPURL},
	srvShebaExtAuthz:   {srvHookEcho, config.HookExtAuthz, func(h *server) string { return "grpc://" + h.grpcAddr }},
	srvShebaHookUnix:   {srvHookEcho, config.HookHTTP, func(h *server) string { return "unix://" + h.unixPath }},
	srvShebaHookH2C:    {srvHookEcho, config.HookHTTP, func(h *server) string { return "h2c" + strings.TrimPrefix(hookHTTPURL(h), "http") }},
}

// hookHTTPURL is where a hookecho answers the http protocol: any path but
// its GET counter's.
func hookHTTPURL(h *server) string { return h.httpURL + "/check" }

// hookScenarios are the rows of the external request hook: sheba with a
// hook that answers at once (bench/baseline/hookecho, on the server CPU as
// an external service on the same machine would be) against the same sheba
// without one.
func (b *bench) hookScenarios(ping, getSub func(*server) load) []scenario {
	const cpu = "CPU srv counts sheba and Postgres, not the hook server, whose CPU per request is in the note under the table"
	noHook := func(l func(*server) load) side {
		return side{label: "sheba no hook", server: srvSheba, expect: []string{"200"}, load: l}
	}
	hooked := func(label, srv, hook string, mayCache bool, l func(*server) load) side {
		return side{label: label, server: srv, expect: []string{"200"}, load: l, hook: hook, hookMayCache: mayCache}
	}
	return []scenario{
		{
			name:  "hook-echo",
			about: "GET /v1/ping through sheba with an http hook over TCP loopback that answers continue at once, against the same sheba without a hook; " + cpu,
			a:     hooked("sheba hook http", srvShebaHook, srvHookEcho, false, ping),
			b:     noHook(ping),
			conc:  b.opts.conc, added: true,
		},
		{
			name:  "hook-echo-unix",
			about: "hook-echo with the hook on a unix socket (unix:///…: HTTP/1.1, the same hookecho); " + cpu,
			a:     hooked("sheba hook unix", srvShebaHookUnix, srvHookEcho, false, ping),
			b:     noHook(ping),
			conc:  b.opts.conc, added: true,
		},
		{
			name:  "hook-echo-h2c",
			about: "hook-echo with the hook over h2c (h2c://…: HTTP/2 with prior knowledge on TCP loopback, the same hookecho); " + cpu,
			a:     hooked("sheba hook h2c", srvShebaHookH2C, srvHookEcho, false, ping),
			b:     noHook(ping),
			conc:  b.opts.conc, added: true,
		},
		{
			name: "hook-echo-subscription",
			about: fmt.Sprintf("get-subscription (%d seeded accounts at random) through sheba with the http hook of hook-echo, against the same sheba without a hook; %s",
				b.opts.accounts, cpu),
			a:    hooked("sheba hook http", srvShebaHook, srvHookEcho, false, getSub),
			b:    noHook(getSub),
			conc: b.opts.conc, added: true,
		},
		{
			name:  "hook-cached",
			about: `hook-echo with a hook that answers {"control":"continue","cacheSeconds":60}: sheba reuses the decision for the same caller, method, headers and body (every ping is the same call), so the hook sees about one check a minute; ` + cpu,
			a:     hooked("sheba hook cached", srvShebaHookCached, srvHookEchoCached, true, ping),
			b:     noHook(ping),
			conc:  b.opts.conc, added: true,
		},
		{
			name:  "hook-ext-authz",
			about: "hook-echo through Envoy's ext_authz (Authorization/Check over gRPC on TCP loopback, answering OK); " + cpu,
			a:     hooked("sheba hook ext_authz", srvShebaExtAuthz, srvHookEcho, false, ping),
			b:     noHook(ping),
			conc:  b.opts.conc, added: true,
		},
	}
}

// startHookEcho starts bench/baseline/hookecho pinned to the server CPU: an
// external service on the same machine as sheba, as Postgres is. Its http
// protocol answers mode ("continue" or "cached") at httpURL (HTTP/1.1 and
// h2c) and on the unix socket unixPath, its ext_authz server listens on
// grpcAddr.
func (b *bench) startHookEcho(ctx context.Context, name, mode string) (*server, error) {
	sock := filepath.Join(b.dir, name+".sock")
	s, err := b.startHTTPGRPC(ctx, name, b.opts.serverCPU, func(httpAddr, grpcAddr string) []string {
		return []string{b.bins.hookecho, "-addr", httpAddr, "-grpc", grpcAddr, "-unix", sock, "-mode", mode}
	})
	if err != nil {
		return nil, err
	}
	s.unixPath = sock
	return s, nil
}

// hookChecks is the number of checks a hookecho has answered so far (a GET
// on its http listener).
func hookChecks(ctx context.Context, hook *server) (int64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hook.httpURL+"/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(body)), 10, 64)
}

// hookEnv configures sheba's external request hook (its config's hook
// section) towards url. The timeout is generous so that a
// load spike on the shared CPU does not turn into 503s, and the failure
// mode is closed so that any failed check shows as an error in the row.
func hookEnv(protocol, url string) []string {
	return []string{
		"SHEBA_HOOK_URL=" + url,
		"SHEBA_HOOK_PROTOCOL=" + protocol,
		"SHEBA_HOOK_TIMEOUT=1s",
		"SHEBA_HOOK_FAILURE_MODE=" + config.HookFailClosed,
	}
}

// hookMeter measures a hook server over one run: the CPU it used and the
// checks it answered. The counter is read outside the CPU window, so the
// reads do not count.
type hookMeter struct {
	hook     *server
	mayCache bool
	checks   int64
	ticks    uint64
}

// startHookMeter starts measuring hook; a nil hook gives a nil meter, whose
// stop does nothing.
func startHookMeter(ctx context.Context, hook *server, mayCache bool) (*hookMeter, error) {
	if hook == nil {
		return nil, nil
	}
	checks, err := hookChecks(ctx, hook)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", hook.proc.name, err)
	}
	return &hookMeter{hook: hook, mayCache: mayCache, checks: checks, ticks: treeCPUTicks(hook.proc.pid())}, nil
}

// stop fills r's hook figures. It fails when the hook server exited, or
// when it answered fewer checks than 9 in 10 of r's requests and sheba may
// not cache its decisions: then sheba did not call it, and the run measured
// sheba without a hook. Wrk counts only the answers it got within the run,
// while the hook also saw the calls still in flight at its end.
func (m *hookMeter) stop(ctx context.Context, r *result, wall time.Duration) error {
	if m == nil {
		return nil
	}
	ticks := treeCPUTicks(m.hook.proc.pid())
	if err := m.hook.proc.exitedErr(); err != nil {
		return err
	}
	checks, err := hookChecks(ctx, m.hook)
	if err != nil {
		return fmt.Errorf("%s: %w", m.hook.proc.name, err)
	}
	r.HookChecks = checks - m.checks
	r.CPUHookSec = float64(ticks-m.ticks) / userHZ
	r.CPUHook = r.CPUHookSec / wall.Seconds()
	if !m.mayCache && float64(r.HookChecks) < 0.9*float64(r.Requests) {
		return fmt.Errorf("%s answered %d checks for %d requests: sheba did not call the hook on every request", m.hook.proc.name, r.HookChecks, r.Requests)
	}
	return nil
}

// figures are, for an added row, what side A adds to side B per request:
// server CPU (sheba and Postgres), p50 and p99, each the median of the
// pairs' differences as the ratio is of theirs; then what A's hook server
// spent and answered. The goals' figures come first, once every row is
// measured (report.judgeAll).
func (s scenario) figures(sr scenarioReport) []figure {
	if s.standby {
		return standbyFigures(sr)
	}
	var out []figure
	if !s.added || len(sr.Sides) != 2 {
		return out
	}
	a, b := sr.Sides[0], sr.Sides[1]
	var cpu, p50, p99 []float64
	for i := 0; i < len(a.Runs) && i < len(b.Runs); i++ {
		ra, rb := a.Runs[i], b.Runs[i]
		if ra.Requests > 0 && rb.Requests > 0 {
			cpu = append(cpu, (cpuPerReq(ra)-cpuPerReq(rb))*1e6)
		}
		p50 = append(p50, ra.P50ms-rb.P50ms)
		p99 = append(p99, ra.P99ms-rb.P99ms)
	}
	out = append(out, fig("added CPU/req", median(cpu), " µs"), fig("added p50", median(p50), " ms"), fig("added p99", median(p99), " ms"))
	if h := a.Summary.Hook; h != nil {
		out = append(out, fig("hook server CPU/req", h.CPUPerReqUS, " µs"), fig("hook checks/req", h.ChecksPerReq, ""))
	}
	return out
}
