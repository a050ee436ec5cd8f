package main

import (
	"fmt"
	"os/exec"
	"slices"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// side is one of the two things a scenario compares.
type side struct {
	label string // as shown in the table
	// server is the key of the process under load in bench.servers ("" for
	// pgbench, whose server is Postgres itself: no peak RSS).
	server string
	// expect lists the answers that are not errors.
	expect []string
	load   func(s *server) load
	// hook is the key in bench.servers of the hook server this side's sheba
	// calls ("" for none). Each run counts the hook server's CPU and the
	// checks it answered apart from the server's; a run in which it answered
	// fewer checks than 9 in 10 requests fails (a hook sheba does not call
	// measures nothing), unless hookMayCache: sheba may answer from its
	// cache of the hook's decisions.
	hook         string
	hookMayCache bool
	// standby: the server CPU counts the bench's standby too, and each run
	// records sheba's, the primary's and the standby's apart (cpuSplit).
	standby bool
}

// scenario is one row pair of the table: A (sheba) against B (its
// baseline), alternated run by run.
type scenario struct {
	name  string
	about string
	a, b  side
	conc  int
	// byOK: the headline rate is successful answers per second (goodput)
	// rather than all answers per second.
	byOK bool
	// unavailable, when set, says why the scenario cannot run with this
	// build; the table shows the reason instead of numbers.
	unavailable string
	// added: B is A without one thing (the hook), so the note and the JSON
	// give what A adds per request: server CPU, p50 and p99.
	added bool
	// standby: the figures are the primary's, the standby's and sheba's
	// CPU per request apart (standbyFigures).
	standby bool
	// done, when set, runs once the row is measured: it stops what only
	// this row needs.
	done func() error
}

// Server keys of bench.servers.
const (
	srvSheba      = "sheba"
	srvShebaShed  = "sheba-shed"
	srvShebaTrace = "sheba-traced"
	// sheba with its rate limits in Redis, and that Redis.
	srvShebaRedis = "sheba-redis"
	srvRedis      = "redis"
	// sheba with the adaptive concurrency limit.
	srvShebaAdaptive = "sheba-adaptive"
	// sheba with an external request hook, and the hook servers
	// (bench/baseline/hookecho) they call.
	srvShebaHook       = "sheba-hook"
	srvShebaHookCached = "sheba-hook-cached"
	srvShebaExtAuthz   = "sheba-hook-ext-authz"
	srvShebaHookUnix   = "sheba-hook-unix"
	srvShebaHookH2C    = "sheba-hook-h2c"
	srvHookEcho        = "hookecho"
	srvHookEchoCached  = "hookecho-cached"
	srvHTTPPing        = "httpping"
	srvGRPCPing        = "grpcping"
	srvPGPing          = "pgping"
)

// loadScenarioNames are the scenarios of the main table, in the order they
// run.
var loadScenarioNames = []string{"ping-rest", "ping-grpc", "error-rest", "readyz", "get-subscription", "get-subscription-pgbench", "login-overload", "ping-rest-traced",
	"ping-rest-redis", "adaptive-overload", "hook-echo", "hook-echo-unix", "hook-echo-h2c", "hook-echo-subscription", "hook-cached",
	"hook-ext-authz", "ping-connect-json", "ping-connect-proto", "ping-grpc-web", scenGetSubscriptionStandby}

// scenarioNames is every scenario in the order they run: the load
// scenarios, the peer rows, then the webhook ones, then failover, then the
// event rows.
var scenarioNames = slices.Concat(loadScenarioNames, peerScenarioNames, webhookScenarios, clusterScenarios, eventScenarios)

// scenarios builds, for this run, the scenarios of scenarioNames; the
// Scenarios section of bench/README.md says what each compares.
func (b *bench) scenarios() []scenario {
	o := b.opts
	hdr := map[string]string{}
	md := map[string]string{}
	if o.auth {
		hdr["x-api-key"] = b.key.key
		md["x-api-key"] = b.key.key
	}
	jsonHdr := map[string]string{"Content-Type": "application/json"}
	for k, v := range hdr {
		jsonHdr[k] = v
	}
	wrkGet := func(path string, h map[string]string) func(*server) load {
		return func(s *server) load {
			return wrkLoad{bin: b.bins.wrk, baseURL: s.httpURL, script: wrkScript{Method: "GET", Path: path, Headers: h}}
		}
	}
	grpcPingLoad := func(s *server) load {
		return grpcLoad{self: b.self, addr: s.grpcAddr, method: shebav1.PingService_Ping_FullMethodName,
			request: &shebav1.PingRequest{}, metadata: md, conns: o.grpcConns}
	}
	getSub := func(s *server) load {
		return wrkLoad{bin: b.bins.wrk, baseURL: s.httpURL, script: wrkScript{Method: "GET", Path: "/v1/accounts/" + accountID(1) + "/subscription",
			Headers: hdr, IDsFile: b.idsFile, PathPrefix: "/v1/accounts/", PathSuffix: "/subscription"}}
	}
	bareHTTP := side{label: "net/http", server: srvHTTPPing, expect: []string{"200"}, load: wrkGet("/v1/ping", hdr)}
	loginBody := fmt.Sprintf(`{"username":%q,"password":%q}`, loginUsername, benchPassword)
	login := func(s *server) load {
		return goLoad{self: b.self, url: s.httpURL + "/v1/accounts:login", method: "POST", body: loginBody, headers: jsonHdr}
	}

	all := []scenario{
		{
			name:  "ping-rest",
			about: "GET /v1/ping through the gateway and the chain, against a bare net/http handler with the same JSON",
			a:     side{label: "sheba", server: srvSheba, expect: []string{"200"}, load: wrkGet("/v1/ping", hdr)},
			b:     bareHTTP,
			conc:  o.conc,
		},
		{
			name:  "ping-grpc",
			about: "PingService/Ping over gRPC, against a bare grpc-go server with the same RPC",
			a:     side{label: "sheba", server: srvSheba, expect: []string{"OK"}, load: grpcPingLoad},
			b:     side{label: "grpc-go", server: srvGRPCPing, expect: []string{"OK"}, load: grpcPingLoad},
			conc:  o.conc,
		},
		{
			name:  "error-rest",
			about: "POST /v1/accounts with an invalid username (400 after auth and validation), against the bare net/http ping",
			a: side{label: "sheba", server: srvSheba, expect: []string{"400"}, load: func(s *server) load {
				return wrkLoad{bin: b.bins.wrk, baseURL: s.httpURL, script: wrkScript{Method: "POST", Path: "/v1/accounts",
					Headers: jsonHdr, Body: `{"username":"NOT VALID!","password":"bench-password"}`}}
			}},
			b:    bareHTTP,
			conc: o.conc,
		},
		{
			name:  "readyz",
			about: "GET /readyz, against a bare net/http handler doing pgxpool.Ping per request",
			a:     side{label: "sheba", server: srvSheba, expect: []string{"200"}, load: wrkGet("/readyz", nil)},
			b:     side{label: "net/http+pgxpool", server: srvPGPing, expect: []string{"200"}, load: wrkGet("/readyz", nil)},
			conc:  o.conc,
		},
		{
			name: "get-subscription",
			about: fmt.Sprintf("GET /v1/accounts/{id}/subscription over %d seeded accounts at random, against a bare net/http handler with a pgxpool running the same SELECT and writing the same JSON",
				o.accounts),
			a:    side{label: "sheba", server: srvSheba, expect: []string{"200"}, load: getSub},
			b:    side{label: "net/http+pgx", server: srvPGPing, expect: []string{"200"}, load: getSub},
			conc: o.conc,
		},
		{
			name:  "get-subscription-pgbench",
			about: "the same lookup against pgbench running the store's SELECT with as many clients: the database's own ceiling, paying nothing for HTTP or JSON",
			a:     side{label: "sheba", server: srvSheba, expect: []string{"200"}, load: getSub},
			b: side{label: "pgbench", expect: []string{"ok"}, load: func(*server) load {
				return pgbenchLoad{bin: b.bins.pgbench, script: b.pgbenchScript, port: b.pg.port, db: "sheba"}
			}},
			conc: o.conc,
		},
		{
			name: "login-overload",
			about: fmt.Sprintf("POST /v1/accounts:login (argon2id) at concurrency %d, max_inflight %d (sheds) against %d (does not); goodput and latency of the 2xx",
				o.loginConc, o.inflightLow, o.inflightHigh),
			a:    side{label: fmt.Sprintf("sheba inflight=%d", o.inflightLow), server: srvShebaShed, expect: []string{"200"}, load: login},
			b:    side{label: fmt.Sprintf("sheba inflight=%d", o.inflightHigh), server: srvSheba, expect: []string{"200"}, load: login},
			conc: o.loginConc,
			byOK: true,
		},
		{
			name:  "ping-rest-traced",
			about: "ping-rest with tracing always on, exporting over OTLP to a no-op collector, against the bare net/http ping",
			a:     side{label: "sheba traced", server: srvShebaTrace, expect: []string{"200"}, load: wrkGet("/v1/ping", hdr)},
			b:     bareHTTP,
			conc:  o.conc,
		},
	}
	if b.tracing == "" {
		all[len(all)-1].unavailable = "n/a (tracing not built yet)"
	}
	all = append(all,
		scenario{
			name:  "ping-rest-redis",
			about: "ping-rest with the global and per-key limits decided in Redis (GCRA, one round trip each), against the same sheba with its in-process buckets",
			a:     side{label: "sheba redis limits", server: srvShebaRedis, expect: []string{"200"}, load: wrkGet("/v1/ping", hdr)},
			b:     side{label: "sheba in-process", server: srvSheba, expect: []string{"200"}, load: wrkGet("/v1/ping", hdr)},
			conc:  o.conc,
		},
		scenario{
			name: "adaptive-overload",
			about: fmt.Sprintf("POST /v1/accounts:login at concurrency %d: the adaptive limit (min %d, max %d) against a fixed max_inflight %d; goodput and latency of the 2xx",
				o.loginConc, o.inflightLow, o.inflightHigh, o.inflightHigh),
			a:    side{label: "sheba adaptive", server: srvShebaAdaptive, expect: []string{"200"}, load: login},
			b:    side{label: fmt.Sprintf("sheba inflight=%d", o.inflightHigh), server: srvSheba, expect: []string{"200"}, load: login},
			conc: o.loginConc,
			byOK: true,
		},
	)
	if _, err := exec.LookPath("redis-server"); err != nil {
		all[len(all)-2].unavailable = "n/a (redis-server not installed)"
	}
	all = append(all, b.hookScenarios(wrkGet("/v1/ping", hdr), getSub)...)
	all = append(all, b.browserScenarios(hdr, wrkGet("/v1/ping", hdr))...)
	all = append(all, b.standbyScenario(getSub))
	return append(all, b.peerScenarios(wrkGet("/v1/ping", hdr), grpcPingLoad)...)
}
