package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// grpcload is the gRPC load generator of the gRPC rows (ping-grpc,
// peer-grpc/*), run as `sheba-bench grpcload ...` in its own process pinned
// to the load CPU like wrk. It replaces ghz, which builds a dynamic message
// and its statistics per call and so, on the one load CPU, was the
// bottleneck of those rows: here the request is encoded once (the driver
// passes its bytes), the answer is not decoded, and each call costs what
// grpc-go's own client costs plus two clock reads.
//
// It is hand-written rather than a library because the well-kept ones (ghz,
// and grpc-go's benchmark/worker, which is not an importable API) are
// exactly the per-call cost this removes.

// grpcLoadConfig is one run of grpcload.
type grpcLoadConfig struct {
	addr     string
	method   string // "/package.Service/Method"
	request  []byte // the request message, encoded
	metadata map[string]string
	conns    int // connections, the workers spread over them
	workers  int // each with one call in flight
	// duration bounds the run in time: no call starts after it. count,
	// when above 0, bounds it in calls.
	duration time.Duration
	count    int64
	// timeout bounds every call in flight once duration is over.
	timeout time.Duration
}

// maxErrorMessages bounds the distinct error texts a run keeps.
const maxErrorMessages = 20

// rawCodec sends the pre-encoded request as it is and leaves the answer
// undecoded: the message bytes cost nothing per call on the client.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: cannot send %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
}

func (rawCodec) Unmarshal(mem.BufferSlice, any) error { return nil }

// Name is the content-subtype: "proto" sends application/grpc+proto, which
// every server reads with its protobuf codec.
func (rawCodec) Name() string { return "proto" }

// grpcLoadRun sends cfg's calls and reports what they got, in the shape
// ghz's report was read into: calls by code name, error texts, and the
// latency percentiles of the OK calls.
func grpcLoadRun(ctx context.Context, cfg grpcLoadConfig) (result, error) {
	if cfg.addr == "" || cfg.method == "" || cfg.conns < 1 || cfg.workers < 1 || cfg.duration <= 0 || cfg.timeout <= 0 {
		return result{}, errors.New("grpcload: need an address, a method, conns >= 1, workers >= 1, duration > 0 and timeout > 0")
	}
	conns := make([]*grpc.ClientConn, min(cfg.conns, cfg.workers))
	for i := range conns {
		cc, err := grpc.NewClient(cfg.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return result{}, err
		}
		defer cc.Close()
		conns[i] = cc
	}
	// Connected before the clock starts, as ghz did.
	for _, cc := range conns {
		if err := waitReady(ctx, cc, cfg.timeout); err != nil {
			return result{}, fmt.Errorf("grpcload: connecting to %s: %w", cfg.addr, err)
		}
	}
	md := metadata.MD{}
	for k, v := range cfg.metadata {
		md.Set(k, v)
	}
	// One context for every call: a per-call deadline would cost a timer a
	// call. It ends cfg.timeout after the last call may start.
	start := time.Now()
	deadline := start.Add(cfg.duration)
	callCtx, cancel := context.WithDeadline(metadata.NewOutgoingContext(ctx, md), deadline.Add(cfg.timeout))
	defer cancel()
	codec := grpc.ForceCodecV2(rawCodec{})

	type tally struct {
		ok     []time.Duration
		codes  map[codes.Code]int64
		errors map[string]int64
	}
	tallies := make([]tally, cfg.workers)
	var started atomic.Int64
	var wg sync.WaitGroup
	for w := range cfg.workers {
		cc := conns[w%len(conns)]
		wg.Go(func() {
			t := tally{codes: map[codes.Code]int64{}, errors: map[string]int64{}}
			req, resp := cfg.request, []byte(nil)
			for {
				if cfg.count > 0 && started.Add(1) > cfg.count {
					break
				}
				t0 := time.Now()
				if !t0.Before(deadline) {
					break
				}
				err := cc.Invoke(callCtx, cfg.method, &req, &resp, codec)
				lat := time.Since(t0)
				if err == nil {
					t.ok = append(t.ok, lat)
					continue
				}
				t.codes[status.Code(err)]++
				if msg := err.Error(); t.errors[msg] > 0 || len(t.errors) < maxErrorMessages {
					t.errors[msg]++
				}
			}
			tallies[w] = t
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	r := result{Seconds: elapsed.Seconds(), LatencyOf: "ok", Statuses: map[string]int64{}}
	var ok []time.Duration
	for _, t := range tallies {
		ok = append(ok, t.ok...)
		for c, n := range t.codes {
			r.Statuses[c.String()] += n
			r.Requests += n
		}
		for msg, n := range t.errors {
			if r.ErrorMessages == nil {
				r.ErrorMessages = map[string]int64{}
			}
			r.ErrorMessages[msg] += n
		}
	}
	if len(ok) > 0 {
		r.Statuses[codes.OK.String()] = int64(len(ok))
		r.Requests += int64(len(ok))
	}
	r.RPS = float64(r.Requests) / r.Seconds
	r.OKPerSec = float64(len(ok)) / r.Seconds
	r.P50ms, r.P90ms, r.P99ms = percentileMs(ok, 50), percentileMs(ok, 90), percentileMs(ok, 99)
	return r, nil
}

// waitReady connects cc and waits, at most timeout, until it is ready.
func waitReady(ctx context.Context, cc *grpc.ClientConn, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cc.Connect()
	for {
		s := cc.GetState()
		if s == connectivity.Ready {
			return nil
		}
		if !cc.WaitForStateChange(ctx, s) {
			return fmt.Errorf("still %s after %s", s, timeout)
		}
	}
}

// grpcload is the subcommand: flags to a grpcLoadConfig, the result as JSON
// on stdout.
func grpcload(args []string) error {
	fs := flag.NewFlagSet("grpcload", flag.ContinueOnError)
	var cfg grpcLoadConfig
	fs.StringVar(&cfg.addr, "addr", "", "host:port of the gRPC server")
	fs.StringVar(&cfg.method, "method", "", `full method name, "/package.Service/Method"`)
	req := fs.String("request", "", "the request message, encoded, in base64 (empty: the empty message)")
	fs.IntVar(&cfg.conns, "conns", 1, "connections, the workers spread over them")
	fs.IntVar(&cfg.workers, "c", 50, "workers, each with one call in flight")
	fs.DurationVar(&cfg.duration, "d", 5*time.Second, "how long to send")
	fs.Int64Var(&cfg.count, "n", 0, "at most this many calls (0: as many as -d allows)")
	fs.DurationVar(&cfg.timeout, "timeout", 10*time.Second, "how long a call may run past -d")
	var md headerFlags
	fs.Var(&md, "H", `metadata "name: value" (repeatable)`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if cfg.request, err = base64.StdEncoding.DecodeString(*req); err != nil {
		return fmt.Errorf("grpcload: -request: %w", err)
	}
	cfg.metadata = map[string]string{}
	for _, h := range md {
		name, value, ok := strings.Cut(h, ":")
		if !ok {
			return fmt.Errorf("grpcload: bad metadata %q", h)
		}
		cfg.metadata[strings.ToLower(strings.TrimSpace(name))] = strings.TrimSpace(value)
	}
	r, err := grpcLoadRun(context.Background(), cfg)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}
