package e2e

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// Callers are isolated (docs/api.md#authentication, #errors): the key is
// checked before the body is read, and error answers do not grow with
// what was sent.

// bigFieldBody returns, gzip-compressed, a JSON body whose one field has a
// name of n bytes starting with prefix: about a kilobyte on the wire for a
// megabyte decompressed.
func bigFieldBody(t *testing.T, prefix string, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	chunk := bytes.Repeat([]byte("a"), 64<<10)
	write := func(b []byte) {
		if _, err := zw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	write([]byte(`{"` + prefix))
	for left := n - len(prefix); left > 0; left -= len(chunk) {
		write(chunk[:min(left, len(chunk))])
	}
	write([]byte(`":1}`))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// liveHeap returns the bytes of the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestBigUnknownFieldsAreBounded sends 300 different bodies, each an
// unknown field whose name is a megabyte (a kilobyte gzip-compressed),
// with the key and then without: with it, each answer is a 400 of at most
// 4 KiB that quotes at most 256 bytes of the name; without it, a 401 whose
// body was never decoded; the server's live heap grows by less than 64 MiB
// either way. The unauthenticated calls are rejected by the chain, once
// each. Not parallel: it measures the heap.
func TestBigUnknownFieldsAreBounded(t *testing.T) {
	const (
		bodies    = 300
		nameBytes = 1_000_000
		maxAnswer = 4 << 10
		maxGrowth = 64 << 20
	)
	e := newTestEnv(t)
	waitReady(t, e)
	client := &http.Client{Timeout: 30 * time.Second}
	send := func(i int, key string) (code int, body []byte, took time.Duration) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.baseURL+"/v1/accounts",
			bytes.NewReader(bigFieldBody(t, strconv.Itoa(i)+"-", nameBytes)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Content-Encoding", "gzip")
		if key != "" {
			req.Header.Set("X-Api-Key", key)
		}
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("body %d: %v", i, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("body %d: read the answer: %v", i, err)
		}
		return resp.StatusCode, b, time.Since(start)
	}
	rejected := func() float64 {
		return series(e.scrape(t), "sheba_rejected_total", "reason")["reason=unauthenticated"]
	}

	for _, run := range []struct {
		name, key string
		httpCode  int
		reason    string
	}{
		{"with the key", testKey, http.StatusBadRequest, reason.MalformedBody},
		{"without a key", "", http.StatusUnauthorized, reason.APIKeyMissing},
	} {
		t.Run(run.name, func(t *testing.T) {
			// The first answers warm what any call warms (pools,
			// buffers).
			send(-1, run.key)
			rejectedBefore := rejected()
			before := liveHeap()
			var bad, largest int
			var slowest, total time.Duration
			for i := range bodies {
				code, body, took := send(i, run.key)
				largest = max(largest, len(body))
				slowest = max(slowest, took)
				total += took
				ok := code == run.httpCode && len(body) <= maxAnswer
				if ok {
					var st *status.Status
					if st, ok = statusOf(body); ok {
						ok = reasonOf(st) == run.reason && !strings.Contains(st.Message(), strings.Repeat("a", reason.MaxQuoted+1))
					}
				}
				if !ok {
					if bad < 3 {
						t.Errorf("body %d: got HTTP %d, %d bytes: %.300q; want %d %s of at most %d bytes quoting at most %d bytes of the name",
							i, code, len(body), body, run.httpCode, run.reason, maxAnswer, reason.MaxQuoted)
					}
					bad++
				}
			}
			after := liveHeap()
			grew := int64(after) - int64(before)
			t.Logf("%d bodies of a %d-byte unknown field, %s: %d wrong answers, the largest %d bytes; %v per call (slowest %v); live heap %.1f MiB before, %.1f MiB after (%+.1f MiB)",
				bodies, nameBytes, run.name, bad, largest, total/bodies, slowest, mib(before), mib(after), float64(grew)/(1<<20))
			if grew > maxGrowth {
				t.Errorf("live heap grew %.1f MiB over %d bodies, want under %d MiB", float64(grew)/(1<<20), bodies, maxGrowth>>20)
			}
			wantRejected := 0.0
			if run.key == "" {
				wantRejected = bodies
			}
			if got := rejected() - rejectedBefore; got != wantRejected {
				t.Errorf("sheba_rejected_total{reason=unauthenticated} grew by %v, want %v", got, wantRejected)
			}
		})
	}

	// A body that does not even decompress: 400 with the key, 401 without,
	// for without a key it is never read.
	corrupt := []byte("not gzip at all")
	r := e.do(t, http.MethodPost, "/v1/accounts", string(corrupt), "Content-Encoding", "gzip")
	wantRESTError(t, r, http.StatusBadRequest, codes.InvalidArgument, "")
	r = e.do(t, http.MethodPost, "/v1/accounts", string(corrupt), "Content-Encoding", "gzip", "X-Api-Key", "")
	wantRESTError(t, r, http.StatusUnauthorized, codes.Unauthenticated, "")
	// On gRPC the key is checked before the message is read (the server's
	// tap: TestGRPCKeyBeforeMessage).
	_, err := shebav1.NewAccountServiceClient(e.anon).CreateAccount(t.Context(), &shebav1.CreateAccountRequest{Username: "nokey", Password: "password1"})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("gRPC CreateAccount without a key: got %v, want Unauthenticated", err)
	}
}

// statusOf decodes a JSON google.rpc.Status answer.
func statusOf(body []byte) (*status.Status, bool) {
	var st spb.Status
	if err := protojson.Unmarshal(body, &st); err != nil {
		return nil, false
	}
	return status.FromProto(&st), true
}

// TestUnauthenticatedStallsDelayNoKeyedCall opens max_concurrent_bodies+2
// connections without a key that send their headers and one byte of a
// 100-byte body, then stall. Keyed creates meanwhile answer 200: they never
// wait for a body slot, which the stalled bodies do not take (they used to,
// and a keyed create answered 429 after a second's wait).
func TestUnauthenticatedStallsDelayNoKeyedCall(t *testing.T) {
	t.Parallel()
	const slots = 4
	e := newTestEnv(t, func(c *config.Config) {
		c.HTTP.MaxConcurrentBodies = slots
		// The stalled connections are closed by the test; this only
		// bounds them should it fail.
		c.HTTP.ReadTimeout = 20 * time.Second
	})
	waitReady(t, e)
	head := "POST /v1/accounts HTTP/1.1\r\nHost: sheba\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
	// 200 ms: the time for the server to read their headers; with the
	// old order, they would then hold every slot.
	wantKeyedCreatesWhileStalled(t, e, []string{head}, slots+2, 200*time.Millisecond, func(int) {
		time.Sleep(300 * time.Millisecond)
	})
}

// wantKeyedCreatesWhileStalled holds n connections open (holdSlowBody),
// each with the next of heads in turn, waits pause for the server to read
// their headers, then makes 3 keyed REST creates, each wanted 200, calling
// after(i) after the i-th.
func wantKeyedCreatesWhileStalled(t *testing.T, e *testEnv, heads []string, n int, pause time.Duration, after func(i int)) {
	t.Helper()
	for i := range n {
		holdSlowBody(t, e.httpAddr, heads[i%len(heads)])
	}
	time.Sleep(pause)
	for i := range 3 {
		code, took, b := keyedCreate(t, e, "stalled-"+strconv.Itoa(i))
		t.Logf("keyed REST create %d with %d bodies stalled: HTTP %d in %v", i, n, code, took)
		if code != http.StatusOK {
			t.Errorf("keyed REST create %d: got HTTP %d after %v (%s), want 200", i, code, took, b)
		}
		after(i)
	}
}

// keyedCreate creates an account over REST with testKey, and returns the HTTP status, how long the answer took, and
// its body.
func keyedCreate(t *testing.T, e *testEnv, username string) (int, time.Duration, []byte) {
	t.Helper()
	body := `{"username":"` + username + `","password":"password1"}`
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.baseURL+"/v1/accounts", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", testKey)
	client := &http.Client{Timeout: 10 * time.Second}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("keyed create %s: %v", username, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, time.Since(start), b
}
