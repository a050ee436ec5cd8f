package main

// The event rows (issue 33's benchmarks): many open streams of
// EventService/StreamEvents, each filtered to one of the four event types,
// while events are written through sheba's API at a steady rate. The
// figures: delivery latency, sheba's CPU per delivered event, and its
// resident memory per open stream. The clients and the writes run in
// eventload (eventload.go), pinned to the load CPU.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	scenEventsFanout = "events-fanout"
	scenEventsSSE    = "events-sse"
)

// eventScenarios are the event rows, run after the cluster ones.
var eventScenarios = []string{scenEventsFanout, scenEventsSSE}

const (
	// eventsLatencyGoal is §17's bound from commit to receipt.
	eventsLatencyGoal = time.Second
	// eventsStreamKiB is §17's bound on memory per open stream.
	eventsStreamKiB = 64
	// eventsSettle is how long the streams stay open before their memory
	// is read, so that the opening's garbage is collected.
	eventsSettle = 2 * time.Second
	// maxStreamsPerConn is sheba's default grpc.max_concurrent_streams:
	// streams beyond it on one connection would wait for a slot.
	maxStreamsPerConn = 256
)

// runEventScenarios runs the selected event rows.
func (b *bench) runEventScenarios(ctx context.Context, logf func(string, ...any)) ([]figureRow, error) {
	var rows []figureRow
	for _, name := range eventScenarios {
		if !slices.Contains(b.opts.scenarios, name) {
			continue
		}
		start := time.Now()
		transport := "grpc"
		if name == scenEventsSSE {
			transport = "sse"
		}
		logf("%s: %d %s streams over %d keys while %d events/s are written", name, b.opts.eventStreams, transport, b.opts.eventKeys, b.opts.eventRate)
		r, err := b.eventRow(ctx, name, transport)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		r.Name, r.Seconds = name, time.Since(start).Seconds()
		logf("%s: %s", name, strings.Join(figureStrings(r.Figures), "; "))
		rows = append(rows, r)
	}
	return rows, nil
}

// eventRow measures one event row: first the writes alone, on a sheba of
// their own (what they cost is taken off the figure per delivery), then
// the streams and the same writes on a fresh sheba, configured for the
// streams.
func (b *bench) eventRow(ctx context.Context, name, transport string) (figureRow, error) {
	o := b.opts
	conns := fmt.Sprintf("over %d gRPC connections", o.eventConns)
	if transport == "sse" {
		conns = "as SSE clients of GET /v1/events:stream, one HTTP/1.1 connection each"
	}
	row := figureRow{About: fmt.Sprintf("%d streams %s, %d API keys, each stream filtered to one of the 4 event types; %d events/s written through the gRPC API (%d/s account.created, the rest subscription created/updated/canceled) for %v",
		o.eventStreams, conns, o.eventKeys, o.eventRate, o.eventAccountRate, o.duration)}
	if !o.auth {
		return row, errors.New("the event rows need API keys: run without -auth=false")
	}
	keys := make([]apiKey, o.eventKeys)
	var list strings.Builder
	for i := range keys {
		keys[i] = newAPIKey()
		keys[i].id = fmt.Sprintf("bench-stream-%d", i+1)
		list.WriteString(keys[i].key + "\n")
	}
	keysFile := filepath.Join(b.dir, name+"-keys.txt")
	if err := os.WriteFile(keysFile, []byte(list.String()), 0o600); err != nil {
		return row, err
	}
	alone, aloneM, err := b.eventPhase(ctx, name+"-writes", transport, keys, keysFile, 0)
	if err != nil {
		return row, fmt.Errorf("the writes alone: %w", err)
	}
	r, m, err := b.eventPhase(ctx, name, transport, keys, keysFile, o.eventStreams)
	if err != nil {
		return row, err
	}
	if r.FirstError != "" {
		row.About += "; the first stream ended early with: " + r.FirstError
	}
	m.writesAloneSec, m.writtenAlone = aloneM.shebaSec, total(alone.Written)
	row.Figures = eventFigures(r, m)
	return row, nil
}

// eventPhase starts a sheba for streams streams, reads its memory, has
// eventload open the streams, reads its memory again and measures the CPU
// while eventload writes and the streams receive.
func (b *bench) eventPhase(ctx context.Context, name, transport string, keys []apiKey, keysFile string, streams int) (eventResult, eventMeasure, error) {
	o := b.opts
	var r eventResult
	var m eventMeasure
	// The limits just fit the streams: max_streams is all of them, and
	// max_streams_per_key a key's share.
	// limits.max_connections (1024 by default) must hold an SSE client's
	// connection each, and the writer's.
	perKey := (o.eventStreams + o.eventKeys - 1) / o.eventKeys
	srv, err := b.startSheba(ctx, "sheba-"+name, shebaConfig{maxInflight: o.inflightHigh, sampler: "always_off", keys: keys,
		env: []string{"SHEBA_EVENTS_MAX_STREAMS=" + strconv.Itoa(o.eventStreams), "SHEBA_EVENTS_MAX_STREAMS_PER_KEY=" + strconv.Itoa(perKey),
			"SHEBA_LIMITS_MAX_CONNECTIONS=" + strconv.Itoa(max(1024, o.eventStreams+64))}})
	if err != nil {
		return r, m, err
	}
	defer srv.proc.stop(5 * time.Second)
	pid, pgPID := srv.proc.pid(), b.pg.postmasterPID()
	if err := sleep(ctx, eventsSettle); err != nil {
		return r, m, err
	}
	if m.rssBeforeKiB, err = rssKiB(pid); err != nil {
		return r, m, err
	}

	argv := b.pin.command(o.loadCPU, b.self, "eventload", "-transport", transport, "-grpc", srv.grpcAddr, "-http", srv.httpURL,
		"-streams", strconv.Itoa(streams), "-conns", strconv.Itoa(o.eventConns), "-keys", keysFile, "-writer-key", b.key.key,
		"-rate", strconv.Itoa(o.eventRate), "-account-rate", strconv.Itoa(o.eventAccountRate), "-accounts", strconv.Itoa(o.accounts),
		"-d", o.duration.String(), "-db", b.pg.url("sheba"))
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return r, m, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return r, m, err
	}
	if err := cmd.Start(); err != nil {
		return r, m, err
	}
	defer func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	}()
	out := bufio.NewReader(stdout)
	// next reads eventload's next line within limit.
	next := func(limit time.Duration) (string, error) {
		got := make(chan string, 1)
		go func() {
			line, _ := out.ReadString('\n')
			got <- line
		}()
		select {
		case line := <-got:
			return line, nil
		case <-time.After(limit):
			_ = cmd.Process.Kill()
			return "", fmt.Errorf("eventload: no answer within %v", limit)
		}
	}
	expect := func(want string, limit time.Duration) error {
		line, err := next(limit)
		if err == nil && strings.TrimSpace(line) != want {
			_ = cmd.Process.Kill()
			err = fmt.Errorf("eventload said %q, want %q; its stderr:\n%s", line, want, lastLines(stderr.String(), 10))
		}
		return err
	}
	openStart := time.Now()
	if err := expect("open", time.Minute); err != nil {
		return r, m, err
	}
	m.opening = time.Since(openStart)
	if streams > 0 {
		if err := sleep(ctx, eventsSettle); err != nil {
			return r, m, err
		}
	}
	if m.rssOpenKiB, err = rssKiB(pid); err != nil {
		return r, m, err
	}
	proc0, pg0, client0 := treeCPUTicks(pid), treeCPUTicks(pgPID), treeCPUTicks(cmd.Process.Pid)
	cores0 := readCPUTimes()
	start := time.Now()
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		return r, m, err
	}
	if err := expect("done", o.duration+time.Minute); err != nil {
		return r, m, err
	}
	m.wall = time.Since(start)
	proc1, pg1, client1 := treeCPUTicks(pid), treeCPUTicks(pgPID), treeCPUTicks(cmd.Process.Pid)
	cores1 := readCPUTimes()
	line, err := next(time.Minute)
	if err != nil {
		return r, m, err
	}
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return r, m, fmt.Errorf("eventload's result %q: %w; its stderr:\n%s", line, err, lastLines(stderr.String(), 10))
	}
	if err := srv.proc.exitedErr(); err != nil {
		return r, m, err
	}
	m.shebaSec, m.pgSec, m.clientSec = float64(proc1-proc0)/userHZ, float64(pg1-pg0)/userHZ, float64(client1-client0)/userHZ
	m.serverCore, m.loadCore = busy(cores0, cores1, max(o.serverCPU, 0)), busy(cores0, cores1, max(o.loadCPU, 0))
	return r, m, nil
}

// total is the sum of n's counts.
func total(n map[string]int) int {
	t := 0
	for _, k := range n {
		t += k
	}
	return t
}

// eventMeasure is what the driver measured around eventload.
type eventMeasure struct {
	rssBeforeKiB, rssOpenKiB int64
	opening, wall            time.Duration
	shebaSec, pgSec          float64
	// clientSec is eventload's CPU: near one core, the client limited
	// the deliveries, and its queueing is in the latency.
	clientSec            float64
	serverCore, loadCore float64
	// The same writes with no stream open: sheba's CPU, and how many.
	writesAloneSec float64
	writtenAlone   int
}

// eventFigures are an event row's figures.
func eventFigures(r eventResult, m eventMeasure) []figure {
	perStream := float64(m.rssOpenKiB-m.rssBeforeKiB) / float64(max(r.Streams, 1))
	var cpuPerDelivery, cpuPerDeliveryRaw float64
	written := total(r.Written)
	// What the writes cost alone, per write, is taken off: the rest is
	// what the streams cost.
	perWriteAlone := m.writesAloneSec / float64(max(m.writtenAlone, 1))
	if r.Delivered > 0 {
		cpuPerDelivery = (m.shebaSec - perWriteAlone*float64(written)) / float64(r.Delivered) * 1e6
		cpuPerDeliveryRaw = m.shebaSec / float64(r.Delivered) * 1e6
	}
	// The goal is on the closest upper bound of commit to receipt: from
	// the event's create_time, taken in the write's transaction before
	// its commit (gRPC's message carries it; for SSE eventload reads it
	// from the log).
	fs := []figure{
		goalFig("delivery latency p99, from the event's create_time", round1(r.CommitP99Ms), " ms", "<=", float64(eventsLatencyGoal.Milliseconds())),
		fig("p50", round1(r.CommitP50Ms), " ms"),
		fig("from the write's request p99", round1(r.P99Ms), " ms"),
	}
	fs = append(fs,
		fig("from the write's request p50", round1(r.P50Ms), " ms"),
		fig("max", round1(r.MaxMs), " ms"),
		fig("from the write's answer p50", round1(r.AnswerP50Ms), " ms"),
		fig("p99", round1(r.AnswerP99Ms), " ms"),
		fig("the writes' own latency p50", round1(r.WriteP50Ms), " ms"), fig("p99", round1(r.WriteP99Ms), " ms"),
		goalFig("RSS per open stream", round1(perStream), " KiB", "<=", eventsStreamKiB),
		fig("sheba's CPU per delivered event, the writes' own cost taken off", round2(cpuPerDelivery), " µs"),
		fig("with the writes' cost", round2(cpuPerDeliveryRaw), " µs"),
		fig("sheba's CPU per write with no stream open", round1(perWriteAlone*1e6), " µs"),
		fig("sheba CPU", round2(m.shebaSec/m.wall.Seconds()), " cores"),
		fig("Postgres CPU", round2(m.pgSec/m.wall.Seconds()), " cores"),
		fig("the clients' CPU (eventload)", round2(m.clientSec/m.wall.Seconds()), " cores"),
		fig("events written/s", round1(r.WriteRate), ""),
		fig("deliveries/s", round1(float64(r.Delivered)/m.wall.Seconds()), ""),
		goalFig("deliveries missed", float64(r.Expected-r.Delivered), "", "<=", 0),
		goalFig("streams ended early", float64(r.StreamErrors), "", "==", 0),
		goalFig("writes failed", float64(r.WriteErrors), "", "==", 0),
		fig("events no write explains", float64(r.Unmatched), ""),
		fig("RSS before the streams", float64(m.rssBeforeKiB/1024), " MiB"),
		fig("with the streams open", float64(m.rssOpenKiB/1024), " MiB"),
		fig("opening every stream", round2(m.opening.Seconds()), " s"),
		fig("server CPU busy", round2(m.serverCore), ""),
		fig("load CPU busy", round2(m.loadCore), ""),
	)
	return fs
}
