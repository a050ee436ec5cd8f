package main

import (
	"bufio"
	"bytes"
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// machine holds the facts of the machine a run measured, for the JSON.
type machine struct {
	Cores       int    `json:"cores"`
	CPUModel    string `json:"cpu_model"`
	MemTotal    string `json:"mem_total"`
	Kernel      string `json:"kernel"`
	GoVersion   string `json:"go_version"`
	Wrk         string `json:"wrk,omitempty"`
	Pgbench     string `json:"pgbench,omitempty"`
	Postgres    string `json:"postgres,omitempty"`
	Taskset     bool   `json:"taskset"`
	ShebaCommit string `json:"sheba_commit"`
	ShebaDirty  bool   `json:"sheba_dirty"`
	ServerCPU   int    `json:"server_cpu"`
	LoadgenCPU  int    `json:"loadgen_cpu"`
	Root        bool   `json:"root"`
	// Peers are the framework versions of the peer rows' programs
	// (bench/peers), by program.
	Peers map[string]string `json:"peers,omitempty"`
}

func readMachine(ctx context.Context, goCmd, repo string) machine {
	m := machine{Cores: runtime.NumCPU(), Root: os.Geteuid() == 0}
	m.CPUModel = procField("/proc/cpuinfo", "model name")
	if kb, err := strconv.ParseFloat(strings.TrimSuffix(procField("/proc/meminfo", "MemTotal"), " kB"), 64); err == nil {
		m.MemTotal = fmt.Sprintf("%.0f GiB", kb/(1<<20))
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.GoVersion = firstLine(ctx, repo, goCmd, "env", "GOVERSION")
	m.ShebaCommit = firstLine(ctx, repo, "git", "rev-parse", "--short", "HEAD")
	m.ShebaDirty = firstLine(ctx, repo, "git", "status", "--porcelain") != ""
	return m
}

// procField returns the value of the first "key : value" line of a /proc file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return ""
}

// firstLine runs a command briefly and returns the first line of its output
// (stdout and stderr), or "".
func firstLine(ctx context.Context, dir string, argv ...string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	out, _ := cmd.CombinedOutput()
	line, _, _ := strings.Cut(string(bytes.TrimSpace(out)), "\n")
	return strings.TrimSpace(line)
}

// buildDeps returns the module versions a Go binary was built with, by path.
func buildDeps(bin string) map[string]string {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return nil
	}
	deps := map[string]string{info.Main.Path: info.Main.Version}
	for _, d := range info.Deps {
		deps[d.Path] = d.Version
	}
	return deps
}

// tracing says how the sheba binary can export traces: "" when it has no
// OpenTelemetry SDK, else the OTLP protocol to use.
func tracingProtocol(deps map[string]string) string {
	if _, ok := deps["go.opentelemetry.io/otel/sdk"]; !ok {
		return ""
	}
	_, httpExp := deps["go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"]
	_, grpcExp := deps["go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"]
	if grpcExp && !httpExp {
		return "grpc"
	}
	return "http/protobuf"
}
