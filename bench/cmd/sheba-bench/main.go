// Command sheba-bench is `make bench`: it builds sheba and the bare
// baselines under bench/baseline, starts them on 127.0.0.1 against the
// throwaway Postgres of scripts/pg.sh test (under which it runs, re-executing
// itself there when started by hand), and runs the load scenarios of
// bench/README.md (what the safety costs, and how close sheba is to the
// machine's limit), alternating sheba and its baseline run by run
// (A B A B ...) so that drift cancels in the ratio; a row whose pair ratios
// spread more than -spread is measured again, once, with twice the pairs.
// It prints a markdown table led by the server CPU per request, writes the
// raw numbers, with the machine's facts, to bench/results/<UTC time>.json,
// and the chart of the rows against their goals beside it (<UTC time>.svg;
// -chart draws it again from a results file).
//
// Servers (sheba, the baselines and Postgres) run on one CPU and the load
// generator (wrk, pgbench or the Go clients) on another, with taskset,
// the same for both sides.
//
// Usage, from the repository root:
//
//	go run ./bench/cmd/sheba-bench [-scenario ping-rest,readyz] [-pairs 3] [-d 5s] [-warmup 2s] [-c 50] [-spread 0.15]
//	go run ./bench/cmd/sheba-bench -chart bench/results/<UTC time>.json
//
// Run `go run ./bench/cmd/sheba-bench -h` for every flag.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 {
		// Subcommands the driver runs as its own pinned child processes.
		switch os.Args[1] {
		case "httpload":
			exit(httpload(os.Args[2:]))
		case "grpcload":
			exit(grpcload(os.Args[2:]))
		case "otlpsink":
			exit(otlpsink(os.Args[2:]))
		case "eventload":
			exit(eventload(os.Args[2:]))
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	exit(err)
}

func exit(err error) {
	if err == nil {
		os.Exit(0)
	}
	fmt.Fprintln(os.Stderr, "sheba-bench:", err)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	var uerr usageError
	if errors.As(err, &uerr) {
		os.Exit(2)
	}
	os.Exit(1)
}

type usageError string

func (e usageError) Error() string { return string(e) }

// options are the driver's flags.
type options struct {
	scenarios    []string
	pairs        int
	spread       float64
	chart        string
	duration     time.Duration
	warmup       time.Duration
	pause        time.Duration
	conc         int
	grpcConns    int
	loginConc    int
	inflightHigh int
	inflightLow  int
	accounts     int
	auth         bool
	serverCPU    int
	loadCPU      int
	resultsDir   string
	goCmd        string
	keep         bool
	// The webhook scenarios (webhooks.go).
	webhookEvents        int
	webhookEndpoints     int
	webhookFail          float64
	webhookOutage        time.Duration
	webhookRate          int
	webhookWrites        int
	webhookBacklog       int
	webhookBacklogOutage time.Duration
	webhookReplicas      int
	webhookFleetEvents   int
	webhookSlow          time.Duration
	// The event rows (events.go).
	eventStreams     int
	eventKeys        int
	eventConns       int
	eventRate        int
	eventAccountRate int
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("sheba-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scen := fs.String("scenario", "", "comma-separated scenarios to run (default all): "+strings.Join(scenarioNames, ", ")+
		"; "+scenPeerREST+" and "+scenPeerGRPC+" name their rows against every peer")
	fs.IntVar(&o.pairs, "pairs", 3, "A/B pairs of runs per scenario")
	fs.Float64Var(&o.spread, "spread", maxSpread, "measure a row again, once, with twice the pairs when its pair ratios spread more than this: the highest over the lowest, less one (0: never)")
	fs.StringVar(&o.chart, "chart", "", "only draw the chart of an existing results JSON, beside it (bench/results/X.json: bench/results/X.svg)")
	fs.DurationVar(&o.duration, "d", 5*time.Second, "length of each measured run (whole seconds)")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "warm-up of each side before a scenario's runs (0 for none)")
	fs.DurationVar(&o.pause, "pause", 100*time.Millisecond, "pause between runs")
	fs.IntVar(&o.conc, "c", 50, "concurrency: connections, each with one request in flight (pgbench: clients; grpcload: workers)")
	fs.IntVar(&o.grpcConns, "grpc-conns", 1, "connections of the gRPC rows' load generator (grpcload), its -c workers spread over them")
	cores := runtime.NumCPU()
	fs.IntVar(&o.loginConc, "login-c", 4*cores*4, "concurrency of login-overload: 4x the hashes the machine runs at once (cores x 4)")
	fs.IntVar(&o.inflightHigh, "inflight-high", 10000, "SHEBA_LIMITS_MAX_INFLIGHT of every sheba but the shedding one (never reached)")
	fs.IntVar(&o.inflightLow, "inflight-low", 4, "SHEBA_LIMITS_MAX_INFLIGHT of the shedding sheba in login-overload")
	fs.IntVar(&o.accounts, "accounts", 10000, "seeded accounts, each with an active subscription")
	fs.BoolVar(&o.auth, "auth", true, "configure an API key and send it (x-api-key) with every business request")
	fs.IntVar(&o.serverCPU, "server-cpu", 0, "CPU of the servers and Postgres (-1: no pinning)")
	fs.IntVar(&o.loadCPU, "load-cpu", 1, "CPU of the load generators (-1: no pinning)")
	fs.StringVar(&o.resultsDir, "results", "bench/results", "folder of the JSON results")
	fs.StringVar(&o.goCmd, "go", "go", "go command")
	fs.IntVar(&o.webhookEvents, "webhook-events", 1000, "events of webhook-intermittent, each to every endpoint")
	fs.IntVar(&o.webhookEndpoints, "webhook-endpoints", 20, "endpoints of webhook-intermittent")
	fs.Float64Var(&o.webhookFail, "webhook-fail", 0.05, "share of webhook-intermittent's requests answered 500, at random")
	fs.DurationVar(&o.webhookOutage, "webhook-outage", 60*time.Second, "how long the failing endpoint of webhook-outage is down")
	fs.IntVar(&o.webhookRate, "webhook-rate", 50, "events/s published during webhook-outage")
	fs.IntVar(&o.webhookWrites, "webhook-writes", 1000, "CreateSubscription calls of webhook-write-cost per subscriber count and round (-pairs rounds)")
	fs.IntVar(&o.webhookBacklog, "webhook-backlog", 100000, "pending deliveries of webhook-backlog")
	fs.DurationVar(&o.webhookBacklogOutage, "webhook-backlog-outage", 20*time.Second, "how long the failing endpoint of webhook-backlog's outage is down")
	fs.IntVar(&o.webhookReplicas, "webhook-replicas", 3, "runners of webhook-fleet")
	fs.IntVar(&o.webhookFleetEvents, "webhook-fleet-events", 300, "events of webhook-fleet")
	fs.DurationVar(&o.webhookSlow, "webhook-slow", 200*time.Millisecond, "how long webhook-fleet's endpoint takes to answer")
	fs.IntVar(&o.eventStreams, "event-streams", 1000, "open streams of the event rows (events-fanout, events-sse)")
	fs.IntVar(&o.eventKeys, "event-keys", 100, "API keys the event rows' streams use, a few streams to a key")
	fs.IntVar(&o.eventConns, "event-conns", 8, "gRPC connections events-fanout's streams share")
	fs.IntVar(&o.eventRate, "event-rate", 200, "events/s the event rows write, over the four types")
	fs.IntVar(&o.eventAccountRate, "event-account-rate", 5, "of -event-rate, account.created events/s (each an argon2id hash on the server)")
	fs.BoolVar(&o.keep, "keep", false, "keep the run's temporary folder (logs, configs, a copy of the Postgres log)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, usageError(err.Error())
	}
	if fs.NArg() > 0 {
		return o, usageError(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	if *scen == "" || *scen == "all" {
		o.scenarios = scenarioNames
	} else {
		for _, s := range strings.Split(*scen, ",") {
			s = strings.TrimSpace(s)
			if g, ok := scenarioGroups[s]; ok {
				o.scenarios = append(o.scenarios, g...)
				continue
			}
			if !slices.Contains(scenarioNames, s) {
				return o, usageError(fmt.Sprintf("-scenario: unknown %q; want one of %s", s, strings.Join(scenarioNames, ", ")))
			}
			o.scenarios = append(o.scenarios, s)
		}
	}
	switch {
	case o.pairs < 1 || o.pairs > maxPairs:
		return o, usageError(fmt.Sprintf("-pairs must be 1..%d", maxPairs))
	case o.spread < 0 || o.spread > 10:
		return o, usageError("-spread must be 0..10")
	case o.duration < time.Second || o.duration > 10*time.Minute || o.duration%time.Second != 0:
		return o, usageError("-d must be whole seconds from 1s to 10m (wrk and pgbench take seconds)")
	case o.warmup < 0 || o.warmup > 10*time.Minute || o.warmup%time.Second != 0:
		return o, usageError("-warmup must be whole seconds up to 10m")
	case o.conc < 1 || o.conc > 1000:
		return o, usageError("-c must be 1..1000")
	case o.grpcConns < 1 || o.grpcConns > o.conc:
		return o, usageError("-grpc-conns must be 1..-c")
	case o.loginConc < 1 || o.loginConc > 1000:
		return o, usageError("-login-c must be 1..1000")
	case o.inflightLow < 1 || o.inflightHigh < 1:
		return o, usageError("-inflight-low and -inflight-high must be at least 1")
	case o.accounts < 1 || o.accounts > 10_000_000:
		return o, usageError("-accounts must be 1..10000000")
	case o.webhookEvents < 1 || o.webhookEvents > 1_000_000 || o.webhookEndpoints < 1 || o.webhookEndpoints > 1000:
		return o, usageError("-webhook-events must be 1..1000000 and -webhook-endpoints 1..1000")
	case o.webhookFail < 0 || o.webhookFail > 0.5:
		return o, usageError("-webhook-fail must be 0..0.5")
	case o.webhookOutage < time.Second || o.webhookOutage > time.Hour || o.webhookBacklogOutage < time.Second || o.webhookBacklogOutage > time.Hour:
		return o, usageError("-webhook-outage and -webhook-backlog-outage must be 1s..1h")
	case o.webhookRate < 1 || o.webhookRate > 1000:
		return o, usageError("-webhook-rate must be 1..1000")
	case o.webhookWrites < 1 || o.webhookWrites > 100_000:
		return o, usageError("-webhook-writes must be 1..100000")
	case o.webhookBacklog < backlogEndpoints || o.webhookBacklog > 10_000_000:
		return o, usageError(fmt.Sprintf("-webhook-backlog must be %d..10000000", backlogEndpoints))
	case o.webhookReplicas < 1 || o.webhookReplicas > 10 || o.webhookFleetEvents < 1 || o.webhookFleetEvents > 100_000:
		return o, usageError("-webhook-replicas must be 1..10 and -webhook-fleet-events 1..100000")
	case o.webhookSlow < 0 || o.webhookSlow > 5*time.Second:
		return o, usageError("-webhook-slow must be 0..5s")
	case o.eventStreams < 1 || o.eventStreams > 100_000 || o.eventKeys < 1 || o.eventKeys > o.eventStreams || o.eventConns < 1 || o.eventConns > 1000:
		return o, usageError("-event-streams must be 1..100000, -event-keys 1..-event-streams and -event-conns 1..1000")
	case (o.eventStreams+o.eventConns-1)/o.eventConns > maxStreamsPerConn:
		return o, usageError(fmt.Sprintf("-event-streams over -event-conns must be at most %d a connection (sheba's grpc.max_concurrent_streams)", maxStreamsPerConn))
	case o.eventRate < 4 || o.eventRate > 10_000 || o.eventAccountRate < 0 || o.eventAccountRate > o.eventRate/4:
		return o, usageError("-event-rate must be 4..10000 and -event-account-rate 0..a quarter of it")
	}
	return o, nil
}

// budget is how long the load itself takes: the warm-ups and runs of every
// scenario, and the pauses between them.
func budget(o options, n int) time.Duration {
	per := 2*o.warmup + time.Duration(2*o.pairs)*o.duration + time.Duration(2*o.pairs+2)*o.pause
	return time.Duration(n) * per
}

// bench is one invocation of the driver.
type bench struct {
	opts    options
	repo    string
	dir     string // temporary folder of the run
	self    string // this executable, for its subcommands
	pin     pinner
	key     apiKey
	bins    binaries
	pg      *postgres
	tracing string // OTLP protocol, or "" when sheba has no tracing
	sink    *server
	// peerVersions are the framework versions of the peers by key
	// (buildPeers).
	peerVersions map[string]string

	idsFile       string
	pgbenchScript string
	servers       map[string]*server
	stderr        io.Writer

	// The copies of the cluster (pgcopy.go): their folder, the copies
	// made, whether the cluster serves replication yet, and the standby
	// get-subscription-standby reads from while it runs.
	pgCopies           string
	copies             []*postgres
	replicationAllowed bool
	standby            *postgres
}

// binaries are the paths of the programs the run uses.
type binaries struct {
	sheba, httpping, grpcping, pgping, hookecho, wrk, pgbench, pgBindir string
	// peers are the programs of bench/peers by key.
	peers map[string]string
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	opts, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	if opts.chart != "" {
		return redrawChart(opts.chart, stdout)
	}
	b := &bench{opts: opts, key: newAPIKey(), servers: map[string]*server{}, stderr: stderr}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, "sheba-bench: "+format+"\n", a...) }

	if b.repo, err = repoRoot(); err != nil {
		return err
	}
	if b.self, err = os.Executable(); err != nil {
		return err
	}
	if b.pg, err = postgresFromEnv(); err != nil {
		return err
	}
	if b.pg == nil {
		return reexecUnderPGSH(b.repo, b.self, args)
	}
	if p, err := exec.LookPath("taskset"); err == nil && opts.serverCPU >= 0 && opts.loadCPU >= 0 {
		b.pin.taskset = p
	} else {
		logf("no pinning: taskset not found or disabled; servers and load generators share every CPU")
	}
	if runtime.NumCPU() < 2 && b.pin.taskset != "" {
		logf("only %d CPU: servers and load generator pinned to the same one", runtime.NumCPU())
		opts.serverCPU, opts.loadCPU = 0, 0
		b.opts = opts
	}
	want := func(names ...string) bool {
		for _, n := range names {
			if slices.Contains(opts.scenarios, n) {
				return true
			}
		}
		return false
	}

	// Tools first: fail before building anything.
	if want("ping-rest", "error-rest", "readyz", "get-subscription", "get-subscription-pgbench", "ping-rest-traced", "ping-rest-redis",
		"hook-echo", "hook-echo-unix", "hook-echo-h2c", "hook-echo-subscription", "hook-cached", "hook-ext-authz", scenGetSubscriptionStandby) || want(scenarioGroups[scenPeerREST]...) {
		if b.bins.wrk, err = ensureWrk(ctx, logf); err != nil {
			return err
		}
	}
	b.bins.pgBindir = b.pg.bindir
	if want(scenGetSubscriptionStandby, scenFailover) {
		// The copies of the cluster (pgcopy.go).
		for _, p := range []string{"pg_basebackup", "pg_ctl"} {
			if st, err := os.Stat(filepath.Join(b.bins.pgBindir, p)); err != nil || st.Mode()&0o111 == 0 {
				return fmt.Errorf("%s not found in %s: the standby rows need it (Debian: apt-get install postgresql)", p, b.bins.pgBindir)
			}
		}
	}
	if want("get-subscription-pgbench") {
		if b.bins.pgbench, err = findPgbench(b.bins.pgBindir); err != nil {
			return err
		}
	}

	if b.dir, err = os.MkdirTemp("", "sheba-bench."); err != nil {
		return err
	}
	defer func() {
		b.stopAll()
		if opts.keep {
			if err := b.pg.copyLog(b.dir); err != nil {
				logf("no copy of the Postgres log: %v", err)
			}
			logf("kept %s", b.dir)
		} else {
			os.RemoveAll(b.dir)
		}
	}()

	started := time.Now()
	logf("building sheba and the baselines")
	if err := b.build(ctx, want(peerScenarioNames...)); err != nil {
		return err
	}
	b.tracing = tracingProtocol(buildDeps(b.bins.sheba))

	scens := b.scenarios()
	var selected []scenario
	for _, s := range scens {
		if want(s.name) {
			selected = append(selected, s)
		}
	}
	runnable := 0
	for _, s := range selected {
		if s.unavailable == "" {
			runnable++
		}
	}
	logf("%d scenario(s), %d pair(s) x %v after a %v warm-up per side: about %v of load, plus the reruns of noisy rows",
		runnable, opts.pairs, opts.duration, opts.warmup, budget(opts, runnable).Round(time.Second))

	logf("Postgres of scripts/pg.sh on 127.0.0.1:%d (%s)", b.pg.port, b.bins.pgBindir)
	if err := b.pg.pin(ctx, b.pin, opts.serverCPU); err != nil {
		return err
	}
	if err := b.prepareDatabase(ctx); err != nil {
		return err
	}
	if b.tracing != "" {
		if b.sink, err = b.startSink(ctx); err != nil {
			return err
		}
	}

	m := readMachine(ctx, opts.goCmd, b.repo)
	m.ServerCPU, m.LoadgenCPU, m.Taskset = opts.serverCPU, opts.loadCPU, b.pin.taskset != ""
	m.Wrk = firstLine(ctx, "/", b.bins.wrk, "-v")
	m.Pgbench = firstLine(ctx, "/", filepath.Join(b.bins.pgBindir, "pgbench"), "--version")
	m.Postgres = firstLine(ctx, "/", filepath.Join(b.bins.pgBindir, "postgres"), "--version")
	m.Peers = b.peerVersions

	rep := report{Started: started.UTC(), Machine: m, Options: reportOptions(opts, b)}
	for _, s := range selected {
		if err := ctx.Err(); err != nil {
			return err
		}
		if s.unavailable != "" {
			rep.Scenarios = append(rep.Scenarios, scenarioReport{Name: s.name, About: s.about, Unavailable: s.unavailable})
			continue
		}
		logf("%s: %s", s.name, s.about)
		sr, err := b.runScenario(ctx, s)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		if s.done != nil {
			if err := s.done(); err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
		}
		rep.Scenarios = append(rep.Scenarios, sr)
	}
	if want(webhookScenarios...) {
		plans := resultsPath(filepath.Join(b.repo, opts.resultsDir), rep, "-plans.txt")
		if rep.Webhooks, err = b.runWebhookScenarios(ctx, opts.scenarios, plans, logf); err != nil {
			return err
		}
	}
	if want(clusterScenarios...) {
		if rep.Cluster, err = b.runClusterScenarios(ctx, logf); err != nil {
			return err
		}
	}
	if want(eventScenarios...) {
		if rep.Events, err = b.runEventScenarios(ctx, logf); err != nil {
			return err
		}
	}
	rep.judgeAll()
	rep.Finished = time.Now().UTC()

	path, err := writeReport(filepath.Join(b.repo, opts.resultsDir), rep)
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, renderTable(rep))
	fmt.Fprint(stdout, renderWebhookTable(rep.Webhooks))
	fmt.Fprint(stdout, renderFigureTable("cluster scenario", rep.Cluster))
	fmt.Fprint(stdout, renderFigureTable("event scenario", rep.Events))
	rel, _ := filepath.Rel(b.repo, path)
	fmt.Fprintf(stdout, "\nRaw numbers: %s (took %v)\n", rel, rep.Finished.Sub(rep.Started).Round(time.Second))
	if svg, err := writeChart(path, rep); err != nil {
		return err
	} else if svg != "" {
		rel, _ := filepath.Rel(b.repo, svg)
		fmt.Fprintf(stdout, "Chart: %s\n", rel)
	}
	return nil
}

// repoRoot finds the folder of sheba's go.mod from the working directory up.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/shebasvc/sheba\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run from inside the sheba repository (no go.mod of github.com/shebasvc/sheba above the working directory)")
		}
		dir = parent
	}
}

// ensureWrk finds wrk, installing Debian's package when it is missing and we
// are root.
func ensureWrk(ctx context.Context, logf func(string, ...any)) (string, error) {
	if p, err := exec.LookPath("wrk"); err == nil {
		return p, nil
	}
	if os.Geteuid() != 0 {
		return "", errors.New("wrk not found: install it (Debian/Ubuntu: sudo apt-get install wrk) and run again")
	}
	logf("wrk not found: installing it with apt-get")
	install := func() error {
		cmd := exec.CommandContext(ctx, "apt-get", "install", "-y", "--no-install-recommends", "wrk")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v\n%s", err, lastLines(string(out), 10))
		}
		return nil
	}
	if err := install(); err != nil {
		// A fresh machine has no package lists yet.
		if out, uerr := exec.CommandContext(ctx, "apt-get", "update").CombinedOutput(); uerr != nil {
			return "", fmt.Errorf("apt-get update: %v\n%s", uerr, lastLines(string(out), 10))
		}
		if err := install(); err != nil {
			return "", fmt.Errorf("apt-get install wrk: %w", err)
		}
	}
	return exec.LookPath("wrk")
}

// findPgbench prefers the pgbench next to the server binaries.
func findPgbench(bindir string) (string, error) {
	p := filepath.Join(bindir, "pgbench")
	if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
		return p, nil
	}
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	return "", errors.New("pgbench not found: install it (Debian: apt-get install postgresql-contrib or postgresql-client)")
}

// build compiles sheba, the baselines, and for the peer rows the peers
// (bench/peers) into the run's folder.
func (b *bench) build(ctx context.Context, withPeers bool) error {
	bin := filepath.Join(b.dir, "bin")
	b.bins.sheba = filepath.Join(bin, "sheba")
	b.bins.httpping = filepath.Join(bin, "httpping")
	b.bins.grpcping = filepath.Join(bin, "grpcping")
	b.bins.pgping = filepath.Join(bin, "pgping")
	b.bins.hookecho = filepath.Join(bin, "hookecho")
	gobuild := func(env []string, args ...string) error {
		cmd := exec.CommandContext(ctx, b.opts.goCmd, append([]string{"build"}, args...)...)
		cmd.Dir = b.repo
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("go build %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := gobuild(nil, "-o", b.bins.sheba, "./cmd/sheba"); err != nil {
		return err
	}
	if err := gobuild(nil, "-o", bin+"/", "./bench/baseline/httpping", "./bench/baseline/grpcping", "./bench/baseline/pgping",
		"./bench/baseline/hookecho"); err != nil {
		return err
	}
	if withPeers {
		return b.buildPeers(ctx, bin)
	}
	return nil
}

// prepareDatabase creates the database, migrates it with sheba's own
// command, seeds it and writes the files wrk and pgbench read.
func (b *bench) prepareDatabase(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, filepath.Join(b.bins.pgBindir, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1",
		b.pg.url("postgres"), "-c", "CREATE DATABASE sheba").CombinedOutput()
	if err != nil {
		return fmt.Errorf("create database: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, b.bins.sheba, "migrate", "up")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+b.pg.url("sheba"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("sheba migrate up: %v\n%s", err, out)
	}
	if err := seed(ctx, b.pg.url("sheba"), b.opts.accounts); err != nil {
		return err
	}
	b.idsFile = filepath.Join(b.dir, "account-ids.txt")
	if err := writeIDs(b.idsFile, b.opts.accounts); err != nil {
		return err
	}
	b.pgbenchScript = filepath.Join(b.dir, "get-subscription.pgbench")
	return os.WriteFile(b.pgbenchScript, []byte(pgbenchScript(b.opts.accounts)), 0o644)
}

// ensureServer starts the server of key once and returns it.
func (b *bench) ensureServer(ctx context.Context, key string) (*server, error) {
	if key == "" {
		return nil, nil
	}
	if s, ok := b.servers[key]; ok {
		if err := s.proc.exitedErr(); err != nil {
			return nil, err
		}
		return s, nil
	}
	var s *server
	var err error
	switch key {
	case srvSheba:
		s, err = b.startSheba(ctx, key, shebaConfig{maxInflight: b.opts.inflightHigh, sampler: "always_off"})
	case srvShebaShed:
		s, err = b.startSheba(ctx, key, shebaConfig{maxInflight: b.opts.inflightLow, sampler: "always_off"})
	case srvShebaRedis:
		var redis *server
		if redis, err = b.ensureServer(ctx, srvRedis); err == nil {
			s, err = b.startSheba(ctx, key, shebaConfig{maxInflight: b.opts.inflightHigh, sampler: "always_off",
				env: []string{"SHEBA_REDIS_URL=redis://" + redis.grpcAddr + "/0"}})
		}
	case srvShebaAdaptive:
		s, err = b.startSheba(ctx, key, shebaConfig{maxInflight: b.opts.inflightHigh, sampler: "always_off",
			env: []string{"SHEBA_LIMITS_ADAPTIVE=true", "SHEBA_LIMITS_MIN_INFLIGHT=" + strconv.Itoa(b.opts.inflightLow)}})
	case srvRedis:
		s, err = b.startRedis(ctx)
	case srvShebaHook, srvShebaHookCached, srvShebaExtAuthz, srvShebaHookUnix, srvShebaHookH2C:
		h := hookedShebas[key]
		var hook *server
		if hook, err = b.ensureServer(ctx, h.hook); err == nil {
			s, err = b.startSheba(ctx, key, shebaConfig{maxInflight: b.opts.inflightHigh, sampler: "always_off", env: hookEnv(h.protocol, h.url(hook))})
		}
	case srvHookEcho:
		s, err = b.startHookEcho(ctx, key, "continue")
	case srvHookEchoCached:
		s, err = b.startHookEcho(ctx, key, "cached")
	case srvShebaStandby:
		var st *postgres
		if st, err = b.ensureStandby(ctx); err == nil {
			s, err = b.startSheba(ctx, key, shebaConfig{maxInflight: b.opts.inflightHigh, sampler: "always_off",
				env: []string{"SHEBA_DATABASE_READ_URL=" + st.url("sheba")}})
		}
	case srvShebaTrace:
		s, err = b.startSheba(ctx, key, shebaConfig{maxInflight: b.opts.inflightHigh, sampler: "always_on"})
	case srvHTTPPing:
		s, err = b.startBaseline(ctx, key, b.bins.httpping, false)
	case srvGRPCPing:
		s, err = b.startBaseline(ctx, key, b.bins.grpcping, true)
	case srvPGPing:
		s, err = b.startBaseline(ctx, key, b.bins.pgping, false, "DATABASE_URL="+b.pg.url("sheba"))
	default:
		p, ok := peerByServer(key)
		if !ok {
			return nil, fmt.Errorf("unknown server %q", key)
		}
		s, err = b.startPeer(ctx, p)
	}
	if err != nil {
		return nil, err
	}
	b.servers[key] = s
	return s, nil
}

// stopAll stops every process the run started, and the copies of the
// cluster. Postgres is scripts/pg.sh's to stop, once the driver has exited.
func (b *bench) stopAll() {
	for _, s := range b.servers {
		s.proc.stop(5 * time.Second)
	}
	b.stopCopies()
	if b.sink != nil {
		b.sink.proc.stop(2 * time.Second)
	}
}

// runScenario warms each side up, then runs A B A B ... and collects the
// results.
func (b *bench) runScenario(ctx context.Context, s scenario) (scenarioReport, error) {
	sr := scenarioReport{Name: s.name, About: s.about, Concurrency: s.conc, ByOK: s.byOK}
	sides := []side{s.a, s.b}
	srvs := make([]*server, 2)
	hooks := make([]*server, 2)
	loads := make([]load, 2)
	for i, sd := range sides {
		srv, err := b.ensureServer(ctx, sd.server)
		if err != nil {
			return sr, err
		}
		srvs[i] = srv
		// Started with the hooked sheba: this only looks it up.
		if hooks[i], err = b.ensureServer(ctx, sd.hook); err != nil {
			return sr, err
		}
		loads[i] = sd.load(srv)
		sr.Sides = append(sr.Sides, sideReport{Label: sd.label, Tool: loads[i].tool(), Server: sd.server, HookServer: sd.hook, Expect: sd.expect})
	}
	env := loadEnv{pin: b.pin, cpu: b.opts.loadCPU, conc: s.conc, dir: b.dir, timeout: 60 * time.Second}
	if b.opts.warmup > 0 {
		for i := range sides {
			r, err := loads[i].run(ctx, env, b.opts.warmup)
			if err != nil {
				return sr, fmt.Errorf("warm-up of %s: %w", sides[i].label, err)
			}
			sr.Sides[i].Warmup = &r
			if err := sleep(ctx, b.opts.pause); err != nil {
				return sr, err
			}
		}
	}
	if err := b.runPairs(ctx, &sr, sides, loads, srvs, hooks, env, b.opts.pairs); err != nil {
		return sr, err
	}
	if rr := rerunFor(sr, b.opts.pairs, b.opts.spread); rr != nil {
		// A noisy row (a neighbour's burst, a pause) is measured again with
		// more pairs, once, rather than reported as it is.
		fmt.Fprintf(b.stderr, "sheba-bench:   pair ratios %s spread %.0f%% (over %.0f%%): measuring again with %d pairs\n", span(rr.FirstRatios), rr.Spread*100, rr.Limit*100, rr.Pairs)
		for i := range sr.Sides {
			sr.Sides[i].Runs = nil
		}
		if err := b.runPairs(ctx, &sr, sides, loads, srvs, hooks, env, rr.Pairs); err != nil {
			return sr, err
		}
		sr.Rerun = rr
	}
	sr.Figures = s.figures(sr)
	fmt.Fprintf(b.stderr, "sheba-bench:   %s %s vs %s %s CPU/req: ratio %.2f; %.0f/s vs %.0f/s: ratio %.2f\n",
		sr.Sides[0].Label, fmtMs(sr.Sides[0].Summary.CPUPerReqUS/1000), sr.Sides[1].Label, fmtMs(sr.Sides[1].Summary.CPUPerReqUS/1000), sr.CPURatio,
		sr.Sides[0].Summary.Rate, sr.Sides[1].Summary.Rate, sr.Ratio)
	return sr, nil
}

// runPairs runs n pairs A B A B ... into sr's sides and summarizes them.
func (b *bench) runPairs(ctx context.Context, sr *scenarioReport, sides []side, loads []load, srvs, hooks []*server, env loadEnv, n int) error {
	for pair := range n {
		for i := range sides {
			r, err := b.measure(ctx, env, loads[i], srvs[i], hooks[i], sides[i])
			if err != nil && ctx.Err() == nil {
				// One failed run (a generator that could not connect in time on
				// a busy machine, say) should not cost the whole table: retry
				// once, and say so in the JSON.
				fmt.Fprintf(b.stderr, "sheba-bench:   pair %d, %s failed, retrying once: %v\n", pair+1, sides[i].label, err)
				sr.Retries = append(sr.Retries, fmt.Sprintf("pair %d, %s: %v", pair+1, sides[i].label, err))
				if srv := b.servers[sides[i].server]; srv != nil && srv.proc.exited() {
					// Something outside the driver ended it: start it again.
					delete(b.servers, sides[i].server)
					if srvs[i], err = b.ensureServer(ctx, sides[i].server); err != nil {
						return err
					}
					loads[i] = sides[i].load(srvs[i])
				}
				r, err = b.measure(ctx, env, loads[i], srvs[i], hooks[i], sides[i])
			}
			if err != nil {
				return fmt.Errorf("pair %d, %s: %w", pair+1, sides[i].label, err)
			}
			sr.Sides[i].Runs = append(sr.Sides[i].Runs, r)
			if err := sleep(ctx, b.opts.pause); err != nil {
				return err
			}
		}
	}
	sr.summarize()
	return nil
}

// measure runs one load of side sd and records the server's peak RSS
// during it, the CPU the server process and Postgres used, and how busy the
// two CPUs were; with a hook server, its CPU and checks apart (hookMeter);
// with the standby, its CPU in the server's, and the parts (cpuSplit).
func (b *bench) measure(ctx context.Context, env loadEnv, l load, srv, hook *server, sd side) (result, error) {
	pid := 0
	if srv != nil {
		pid = srv.proc.pid()
		resetPeakRSS(pid)
	}
	hm, err := startHookMeter(ctx, hook, sd.hookMayCache)
	if err != nil {
		return result{}, err
	}
	pgPID, standbyPID := b.pg.postmasterPID(), 0
	if sd.standby && b.standby != nil {
		standbyPID = b.standby.postmasterPID()
	}
	cores0 := readCPUTimes()
	proc0, pg0, st0 := treeCPUTicks(pid), treeCPUTicks(pgPID), treeCPUTicks(standbyPID)
	start := time.Now()
	r, err := l.run(ctx, env, b.opts.duration)
	wall := time.Since(start)
	proc1, pg1, st1 := treeCPUTicks(pid), treeCPUTicks(pgPID), treeCPUTicks(standbyPID)
	cores1 := readCPUTimes()
	if err == nil && r.Requests == 0 {
		err = errors.New("no request completed")
	}
	if err == nil {
		err = hm.stop(ctx, &r, wall)
	}
	if err != nil {
		return r, err
	}
	if pid != 0 {
		if err := srv.proc.exitedErr(); err != nil {
			return r, err
		}
		r.PeakRSSKiB, _ = peakRSSKiB(pid)
	}
	r.CPUServerSec = float64(proc1-proc0+pg1-pg0+st1-st0) / userHZ
	if sd.standby {
		r.CPUSplit = &cpuSplit{ProcessSec: float64(proc1-proc0) / userHZ, PrimarySec: float64(pg1-pg0) / userHZ, StandbySec: float64(st1-st0) / userHZ}
	}
	r.CPUServer = r.CPUServerSec / wall.Seconds()
	r.CPUServerCore = busy(cores0, cores1, max(b.opts.serverCPU, 0))
	r.CPULoadCore = busy(cores0, cores1, max(b.opts.loadCPU, 0))
	return r, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// resultsPath is the file of the run's results of kind suffix in dir:
// dir/<UTC start time><suffix>.
func resultsPath(dir string, rep report, suffix string) string {
	return filepath.Join(dir, rep.Started.Format("20060102T150405Z")+suffix)
}

// writeReport writes rep as indented JSON to dir/<UTC start time>.json.
func writeReport(dir string, rep report) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := resultsPath(dir, rep, ".json")
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return "", err
	}
	return path, os.WriteFile(path, append(b, '\n'), 0o644)
}
