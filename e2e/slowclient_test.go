package e2e

import (
	"bufio"
	"errors"
	"maps"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shebasvc/sheba/config"
)

// Slow clients are bounded (docs/operations.md#slow-clients).

// slowClient opens a connection to addr, sends head, then one more byte
// every interval, and returns how long until the server answered or
// closed, and the answer's status line ("" if it closed without one).
func slowClient(addr, head string, interval time.Duration) (took time.Duration, answer string, err error) {
	start := time.Now()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	if _, err := c.Write([]byte(head)); err != nil {
		return 0, "", err
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if _, err := c.Write([]byte("a")); err != nil {
					return
				}
			}
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	took = time.Since(start)
	if line == "" && err != nil && !isClosed(err) {
		return took, "", err
	}
	return took, strings.TrimSpace(line), nil
}

// isClosed reports whether err says the server closed the connection,
// rather than that our own read deadline passed.
func isClosed(err error) bool {
	var ne net.Error
	return !errors.As(err, &ne) || !ne.Timeout()
}

// TestSlowClients opens 100 connections that send their headers a byte at
// a time and 200 that trickle a login body a byte at a time: every one is
// cut within the read deadlines (http.read_header_timeout 1 s,
// http.read_timeout 2 s here), the heap stays bounded meanwhile, GET
// /v1/ping keeps answering, and a shutdown with more of them open still
// ends cleanly (exit status 0). Not parallel: it measures the heap.
func TestSlowClients(t *testing.T) {
	const (
		headerTimeout = time.Second
		readTimeout   = 2 * time.Second
		slowHeaders   = 100
		slowBodies    = 200
		// A connection is cut at its deadline, or answered 429 after a
		// second's wait for a body slot; the slack covers a loaded machine
		// (under -race). Without the deadlines they would hold on until
		// their own 20 s.
		bound = 3 * readTimeout
	)
	e := newTestEnv(t, func(c *config.Config) {
		c.HTTP.ReadHeaderTimeout = headerTimeout
		c.HTTP.ReadTimeout = readTimeout
	})
	waitReady(t, e)
	headHeader := "GET /v1/ping HTTP/1.1\r\nHost: sheba\r\nX-Slow: "
	headBody := "POST /v1/accounts:login HTTP/1.1\r\nHost: sheba\r\nContent-Type: application/json\r\n" +
		"X-Api-Key: " + testKey + "\r\nContent-Length: 100000\r\n\r\n{\"username\":\""

	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc)
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()

	type result struct {
		kind   string
		took   time.Duration
		answer string
		err    error
	}
	results := make(chan result, slowHeaders+slowBodies)
	var wg sync.WaitGroup
	for i := range slowHeaders + slowBodies {
		wg.Go(func() {
			kind, head := "header", headHeader
			if i >= slowHeaders {
				kind, head = "body", headBody
			}
			took, answer, err := slowClient(e.httpAddr, head, 100*time.Millisecond)
			results <- result{kind, took, answer, err}
		})
	}
	// Meanwhile the ping answers.
	pingClient := &http.Client{Timeout: time.Second}
	pings := 0
	for deadline := time.Now().Add(readTimeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := pingClient.Get(e.baseURL + "/v1/ping")
		if err != nil {
			t.Errorf("GET /v1/ping among slow clients: %v", err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET /v1/ping among slow clients: got %d, want 200", resp.StatusCode)
		}
		pings++
	}
	wg.Wait()
	close(results)
	close(stopSampling)
	<-sampled

	answers := map[string]int{}
	var slowest [2]time.Duration
	for r := range results {
		if r.err != nil {
			t.Errorf("slow %s: %v", r.kind, r.err)
			continue
		}
		if r.took > bound {
			t.Errorf("slow %s cut after %v, want within %v", r.kind, r.took, bound)
		}
		i := 0
		if r.kind == "body" {
			i = 1
		}
		slowest[i] = max(slowest[i], r.took)
		answer := r.answer
		if answer == "" {
			answer = "closed without an answer"
		}
		answers[r.kind+": "+answer]++
	}
	for _, k := range slices.Sorted(maps.Keys(answers)) {
		t.Logf("%4d slow %s", answers[k], k)
	}
	grew := int64(peak.Load()) - int64(base.HeapAlloc)
	t.Logf("slowest cut: headers %v (read_header_timeout %v), bodies %v (read_timeout %v); %d pings answered meanwhile",
		slowest[0], headerTimeout, slowest[1], readTimeout, pings)
	t.Logf("heap: %.1f MiB before, peak %.1f MiB (+%.1f MiB) with %d slow connections",
		mib(base.HeapAlloc), mib(peak.Load()), float64(grew)/(1<<20), slowHeaders+slowBodies)
	// Each connection may hold one small buffer; a body buffer per
	// connection (100 KB declared) or a decompressor each would pass this.
	if limit := int64(32 << 20); grew > limit {
		t.Errorf("heap grew %.1f MiB with slow clients, want under %d MiB", float64(grew)/(1<<20), limit>>20)
	}

	// A shutdown with slow clients open ends cleanly.
	var more sync.WaitGroup
	for i := range 40 {
		more.Go(func() {
			head := headHeader
			if i%2 == 1 {
				head = headBody
			}
			_, _, _ = slowClient(e.httpAddr, head, 100*time.Millisecond)
		})
	}
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if err := e.stop(); err != nil {
		t.Errorf("shutdown with slow clients open: got %v, want nil (exit status 0)", err)
	}
	t.Logf("shutdown with 40 slow clients open took %v", time.Since(start))
	more.Wait()
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
