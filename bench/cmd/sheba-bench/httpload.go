package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// headerFlags collects repeated -H "Name: value" flags.
type headerFlags []string

func (h *headerFlags) String() string     { return strings.Join(*h, ", ") }
func (h *headerFlags) Set(v string) error { *h = append(*h, v); return nil }

// maxRequestsPerWorker bounds each worker of httpload in count as -d bounds
// it in time.
const maxRequestsPerWorker = 5_000_000

// httpload is the closed-loop HTTP client of login-overload, run as
// `sheba-bench httpload ...` in its own process (pinned like wrk). It
// exists because wrk reports one latency histogram over all responses: here
// the 429s that a shedding server answers in microseconds would hide the
// latency of the logins that succeed. It records each request's status and
// latency and prints a JSON result whose percentiles are of 2xx answers only.
func httpload(args []string) error {
	fs := flag.NewFlagSet("httpload", flag.ContinueOnError)
	url := fs.String("url", "", "URL to send every request to")
	method := fs.String("method", http.MethodGet, "HTTP method")
	body := fs.String("body", "", "request body")
	conc := fs.Int("c", 32, "concurrent connections, each with one request in flight")
	dur := fs.Duration("d", 5*time.Second, "how long to send")
	var headers headerFlags
	fs.Var(&headers, "H", `request header "Name: value" (repeatable)`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" || *conc < 1 || *dur <= 0 {
		return fmt.Errorf("httpload: need -url, -c >= 1 and -d > 0")
	}
	hdr := http.Header{}
	for _, h := range headers {
		name, value, ok := strings.Cut(h, ":")
		if !ok {
			return fmt.Errorf("httpload: bad header %q", h)
		}
		hdr.Set(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	client := &http.Client{
		Transport: &http.Transport{
			MaxIdleConns:        *conc,
			MaxIdleConnsPerHost: *conc,
			MaxConnsPerHost:     *conc,
			DisableCompression:  true,
		},
		Timeout: 30 * time.Second,
	}

	type sample struct {
		status int // 0: transport error
		lat    time.Duration
	}
	perWorker := make([][]sample, *conc)
	start := time.Now()
	deadline := start.Add(*dur)
	var wg sync.WaitGroup
	for w := range *conc {
		wg.Go(func() {
			var out []sample
			for i := 0; i < maxRequestsPerWorker && time.Now().Before(deadline); i++ {
				req, err := http.NewRequest(*method, *url, bytes.NewReader([]byte(*body)))
				if err != nil {
					return
				}
				req.Header = hdr.Clone()
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					out = append(out, sample{0, time.Since(t0)})
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				out = append(out, sample{resp.StatusCode, time.Since(t0)})
			}
			perWorker[w] = out
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	r := result{Seconds: elapsed.Seconds(), LatencyOf: "2xx", Statuses: map[string]int64{}}
	var ok []time.Duration
	for _, samples := range perWorker {
		for _, s := range samples {
			r.Requests++
			if s.status == 0 {
				if r.SocketErrors == nil {
					r.SocketErrors = map[string]int64{}
				}
				r.SocketErrors["transport"]++
				continue
			}
			r.Statuses[strconv.Itoa(s.status)]++
			if s.status >= 200 && s.status < 300 {
				ok = append(ok, s.lat)
			}
		}
	}
	r.RPS = float64(r.Requests) / r.Seconds
	r.OKPerSec = float64(len(ok)) / r.Seconds
	r.P50ms, r.P90ms, r.P99ms = percentileMs(ok, 50), percentileMs(ok, 90), percentileMs(ok, 99)
	return json.NewEncoder(os.Stdout).Encode(r)
}
