package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
)

// BenchmarkGatewayJSON serves REST requests through the whole HTTP handler
// (body guard, compression, gateway, in-process channel, the chain, the
// handler) without a network: a ping, a lookup in Postgres (and the same
// read from a standby), and a 400 from validation, with tracing off; and a ping with tracing on and the request
// not sampled ("ping-unsampled"), what most requests are under a ratio
// sampler, and sampled ("ping-traced").
func BenchmarkGatewayJSON(b *testing.B) {
	runBenchCases(b, gatewayJSONBenchCases(b))
}

// gatewayJSONBenchCases are BenchmarkGatewayJSON's rows.
func gatewayJSONBenchCases(tb testing.TB) []benchCase {
	const key = "bench-key-0123456789abcdefghijklmnop"
	sum := sha256.Sum256([]byte(key))
	cfg := config.Default()
	cfg.Database.URL = storetest.NewDatabase(tb)
	cfg.Auth.Keys = []config.APIKey{{ID: "bench", SHA256: hex.EncodeToString(sum[:])}}
	pool, err := pgxpool.New(context.Background(), cfg.Database.URL)
	if err != nil {
		tb.Fatal(err)
	}
	defer pool.Close()
	a, err := store.New(pool).CreateAccount(context.Background(), "bench", "not-a-hash")
	if err != nil {
		tb.Fatal(err)
	}
	handler := func(opts ...Option) http.Handler {
		return benchApp(tb, cfg, opts...).Handler()
	}
	untraced := handler()
	// The browser protocols both ways (browserByConnect).
	vanguard := handler(withConnectHandlers(false))
	connectGo := handler(withConnectHandlers(true))
	unsampled := handler(WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))))
	// Every request sampled and its span recorded, exported nowhere: what
	// tracing costs the request itself (make bench's ping-rest-traced
	// also exports).
	sampled := handler(WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))))
	// The lookup read from a standby (database.read_url; here the same
	// server, whose lag is 0), for the cost of the routing.
	standbyCfg := cfg
	standbyCfg.Database.ReadURL = cfg.Database.URL
	viaStandby := benchApp(tb, standbyCfg).Handler()
	const browserPing = "/sheba.v1.PingService/Ping"
	var cases []benchCase
	for _, bc := range []struct {
		name, method, path, body string
		h                        http.Handler
		want                     int
		// contentType, when set, is the request's (else JSON with a body).
		contentType string
	}{
		{"ping", http.MethodGet, "/v1/ping", "", untraced, http.StatusOK, ""},
		{"ping-unsampled", http.MethodGet, "/v1/ping", "", unsampled, http.StatusOK, ""},
		{"ping-traced", http.MethodGet, "/v1/ping", "", sampled, http.StatusOK, ""},
		{"get-account", http.MethodGet, "/v1/accounts/" + a.ID, "", untraced, http.StatusOK, ""},
		{"get-account-standby", http.MethodGet, "/v1/accounts/" + a.ID, "", viaStandby, http.StatusOK, ""},
		{"invalid-username", http.MethodPost, "/v1/accounts", `{"username":"X","password":"password1"}`, untraced, http.StatusBadRequest, ""},
		// The browser protocols (docs/browser.md), as served by default
		// (browserByConnect), then through vanguard and by connect-go's
		// handlers, to compare the two in one process.
		{"ping-connect-json", http.MethodPost, browserPing, "{}", untraced, http.StatusOK, "application/json"},
		{"ping-connect-proto", http.MethodPost, browserPing, "", untraced, http.StatusOK, "application/proto"},
		{"ping-grpc-web", http.MethodPost, browserPing, "\x00\x00\x00\x00\x00", untraced, http.StatusOK, "application/grpc-web+proto"},
		{"vanguard/ping-connect-json", http.MethodPost, browserPing, "{}", vanguard, http.StatusOK, "application/json"},
		{"vanguard/ping-connect-proto", http.MethodPost, browserPing, "", vanguard, http.StatusOK, "application/proto"},
		{"vanguard/ping-grpc-web", http.MethodPost, browserPing, "\x00\x00\x00\x00\x00", vanguard, http.StatusOK, "application/grpc-web+proto"},
		{"connectgo/ping-connect-json", http.MethodPost, browserPing, "{}", connectGo, http.StatusOK, "application/json"},
		{"connectgo/ping-connect-proto", http.MethodPost, browserPing, "", connectGo, http.StatusOK, "application/proto"},
		{"connectgo/ping-grpc-web", http.MethodPost, browserPing, "\x00\x00\x00\x00\x00", connectGo, http.StatusOK, "application/grpc-web+proto"},
	} {
		cases = append(cases, benchCase{bc.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				req := httptest.NewRequest(bc.method, bc.path, strings.NewReader(bc.body))
				req.Header.Set("X-Api-Key", key)
				switch {
				case bc.contentType != "":
					req.Header.Set("Content-Type", bc.contentType)
				case bc.body != "":
					req.Header.Set("Content-Type", "application/json")
				}
				rec := httptest.NewRecorder()
				bc.h.ServeHTTP(rec, req)
				if rec.Code != bc.want {
					b.Fatalf("got %d, want %d: %s", rec.Code, bc.want, rec.Body)
				}
			}
			if cpu := processCPU() - cpu; cpu > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			}
		}})
	}
	return cases
}
