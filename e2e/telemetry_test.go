package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/e2e/resttest"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/internal/app"
)

// scrape reads /metrics as a REST client would and parses it.
func (e *testEnv) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	r := e.do(t, http.MethodGet, "/metrics", "", "X-Api-Key", "")
	wantCode(t, r, http.StatusOK)
	if strings.Contains(string(r.Body), testKey) {
		t.Error("an API key appears in /metrics")
	}
	return parseMetrics(t, r.Body)
}

// scrapeAt reads /metrics at baseURL (the operator port, say), on a
// connection of its own that it closes.
func scrapeAt(t *testing.T, baseURL string) map[string]*dto.MetricFamily {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	r := resttest.Client{BaseURL: baseURL, HTTP: client}.Do(t, http.MethodGet, "/metrics", "")
	wantCode(t, r, http.StatusOK)
	return parseMetrics(t, r.Body)
}

// tryScrapeAt is scrapeAt for a condition that waitFor retries: a scrape
// that fails (no answer, not 200) returns false rather than end the test.
func tryScrapeAt(t *testing.T, baseURL string) (map[string]*dto.MetricFamily, bool) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, baseURL+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, false
	}
	return parseMetrics(t, page), true
}

// parseMetrics parses a /metrics page.
func parseMetrics(t *testing.T, page []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(string(page)))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return families
}

// series returns the values of a counter or gauge family by its labels,
// written "k=v,k=v" in the order of labels.
func series(families map[string]*dto.MetricFamily, name string, labels ...string) map[string]float64 {
	out := map[string]float64{}
	f, ok := families[name]
	if !ok {
		return out
	}
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		var key []string
		for _, l := range labels {
			key = append(key, l+"="+have[l])
		}
		v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
		out[strings.Join(key, ",")] += v
	}
	return out
}

// TestMetrics makes a scripted set of calls on both transports and checks
// the exact counts per method, code and key, and per rejection reason.
func TestMetrics(t *testing.T) {
	t.Parallel()
	const otherKey = "other-key-0123456789abcdefghijklm"
	e := newTestEnv(t, func(c *config.Config) {
		c.Auth.Keys = append(c.Auth.Keys, keyEntry("other", otherKey))
		c.Limits.PerKeyRate, c.Limits.PerKeyBurst = 0.001, 1 // one call per key, then key_rate
	})
	anonAccount := shebav1.NewAccountServiceClient(e.anon)
	other := func(ctx context.Context) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "x-api-key", otherKey)
	}

	// The test key: one NotFound over gRPC, then two key_rate rejections,
	// one of them over REST.
	e.getAccountGRPC(t.Context())
	e.getAccountGRPC(t.Context())
	wantCode(t, e.do(t, http.MethodGet, "/v1/accounts/"+unknownID, ""), http.StatusTooManyRequests)
	// The other key: one account created over REST.
	wantCode(t, e.do(t, http.MethodPost, "/v1/accounts", `{"username":"lena","password":"password1"}`, "X-Api-Key", otherKey), http.StatusOK)
	// No key: rejected, except for the public Ping.
	_, _ = anonAccount.GetAccount(t.Context(), &shebav1.GetAccountRequest{AccountId: unknownID})
	_, _ = anonAccount.GetAccount(other(t.Context()), &shebav1.GetAccountRequest{AccountId: "bad"}) // key_rate: other's token is spent
	wantCode(t, e.do(t, http.MethodGet, "/v1/ping", "", "X-Api-Key", ""), http.StatusOK)

	f := e.scrape(t)
	const acct = "/sheba.v1.AccountService/"
	wantRequests := map[string]float64{
		"method=" + acct + "GetAccount,code=NotFound,api_key_id=test":           1,
		"method=" + acct + "GetAccount,code=ResourceExhausted,api_key_id=test":  2,
		"method=" + acct + "CreateAccount,code=OK,api_key_id=other":             1,
		"method=" + acct + "GetAccount,code=Unauthenticated,api_key_id=none":    1,
		"method=" + acct + "GetAccount,code=ResourceExhausted,api_key_id=other": 1,
		"method=/sheba.v1.PingService/Ping,code=OK,api_key_id=none":             1,
	}
	if diff := cmp.Diff(wantRequests, series(f, "sheba_requests_total", "method", "code", "api_key_id")); diff != "" {
		t.Errorf("sheba_requests_total (-want +got):\n%s", diff)
	}
	wantRejected := map[string]float64{"reason=unauthenticated": 1, "reason=rate": 0, "reason=key_rate": 3, "reason=inflight": 0}
	if diff := cmp.Diff(wantRejected, series(f, "sheba_rejected_total", "reason")); diff != "" {
		t.Errorf("sheba_rejected_total (-want +got):\n%s", diff)
	}
	handled := series(f, "grpc_server_handled_total", "grpc_service", "grpc_method", "grpc_code")
	for k, want := range map[string]float64{
		"grpc_service=sheba.v1.AccountService,grpc_method=GetAccount,grpc_code=ResourceExhausted": 3,
		"grpc_service=sheba.v1.AccountService,grpc_method=CreateAccount,grpc_code=OK":             1,
		"grpc_service=sheba.v1.SubscriptionService,grpc_method=ListSubscriptions,grpc_code=OK":    0,
	} {
		if got, ok := handled[k]; !ok || got != want {
			t.Errorf("grpc_server_handled_total{%s}: got %v (present %v), want %v", k, got, ok, want)
		}
	}
	if h := f["grpc_server_handling_seconds"]; h == nil || len(h.GetMetric()) == 0 || h.GetMetric()[0].GetHistogram().GetBucket()[0].GetUpperBound() > 0.0001 {
		t.Errorf("grpc_server_handling_seconds has no bucket at or under 100µs: %v", h)
	}
	for _, name := range []string{"sheba_inflight_requests", "sheba_db_pool_max_conns", "sheba_db_pool_acquires_total", "go_goroutines", "process_cpu_seconds_total"} {
		if f[name] == nil {
			t.Errorf("metric %s is missing", name)
		}
	}
	// Each pool by its label: the API's (database.max_conns, 8 here) and
	// the webhook queue's (webhooks.database_max_conns); no read pool
	// without database.read_url.
	wantPools := map[string]float64{"pool=primary": 8, "pool=river": float64(config.Default().Webhooks.DatabaseMaxConns)}
	if diff := cmp.Diff(wantPools, series(f, "sheba_db_pool_max_conns", "pool")); diff != "" {
		t.Errorf("sheba_db_pool_max_conns by pool (-want +got):\n%s", diff)
	}
	// Serving, with the database answering.
	for _, name := range []string{"sheba_ready", "sheba_database_up"} {
		if got := series(f, name)[""]; got != 1 {
			t.Errorf("%s: got %v, want 1", name, got)
		}
	}
}

// newRecorder returns a tracer provider that samples everything and keeps
// the finished spans in memory.
func newRecorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

// TestTraces sends a REST and a gRPC call, each with the caller's
// traceparent, and finds a server span in the caller's trace, parented by
// the caller's span, with the SQL spans below it.
func TestTraces(t *testing.T) {
	t.Parallel()
	tp, exp := newRecorder(t)
	e := newTestEnvWith(t, tp, nil)
	id := e.newAccount(t, "mona")

	for _, test := range []struct {
		name, traceID, parent string
		call                  func(traceparent string)
		wantKind              trace.SpanKind
		wantAttr              attribute.KeyValue
	}{
		{
			name: "REST", traceID: "4bf92f3577b34da6a3ce929d0e0e4736", parent: "00f067aa0ba902b7",
			call: func(tp string) {
				wantCode(t, e.do(t, http.MethodGet, "/v1/accounts/"+id, "", "Traceparent", tp), http.StatusOK)
			},
			wantAttr: attribute.String("http.route", "/v1/accounts/{accountId}"),
		},
		{
			name: "gRPC", traceID: "5bf92f3577b34da6a3ce929d0e0e4737", parent: "10f067aa0ba902b8",
			call: func(tp string) {
				ctx := metadata.AppendToOutgoingContext(t.Context(), "traceparent", tp)
				if _, err := e.account.GetAccount(ctx, &shebav1.GetAccountRequest{AccountId: id}); err != nil {
					t.Fatalf("GetAccount: %v", err)
				}
			},
			wantAttr: attribute.String("rpc.method", "sheba.v1.AccountService/GetAccount"),
		},
		{
			// The browser protocols' calls are the gRPC server's own.
			name: "Connect", traceID: "6bf92f3577b34da6a3ce929d0e0e4738", parent: "20f067aa0ba902b9",
			call: func(tp string) {
				a := browserCall[shebav1.GetAccountRequest, shebav1.GetAccountResponse](t, e, "connect-json",
					"/sheba.v1.AccountService/GetAccount", &shebav1.GetAccountRequest{AccountId: id}, testKey, "Traceparent", tp)
				if a.st != nil {
					t.Fatalf("GetAccount: %v", a.st)
				}
			},
			wantAttr: attribute.String("rpc.method", "sheba.v1.AccountService/GetAccount"),
		},
	} {
		t.Run(test.name, func(t *testing.T) {
			test.call("00-" + test.traceID + "-" + test.parent + "-01")
			var server sdktrace.ReadOnlySpan
			var inTrace []tracetest.SpanStub
			// The gRPC server span ends in the stats handler after the
			// answer has left, so the client may see the answer first.
			waitFor(t, 5*time.Second, "the server span in trace "+test.traceID, func() bool {
				server, inTrace = nil, nil
				for _, s := range exp.GetSpans() {
					if s.SpanContext.TraceID().String() != test.traceID {
						continue
					}
					inTrace = append(inTrace, s)
					if s.SpanKind == trace.SpanKindServer {
						server = s.Snapshot()
					}
				}
				return server != nil
			})
			servers := 0
			for _, s := range inTrace {
				if s.SpanKind == trace.SpanKindServer {
					servers++
				}
			}
			if servers != 1 {
				t.Errorf("%d server spans in the trace, want 1: %s", servers, spanNames(inTrace))
			}
			if got := server.Parent().SpanID().String(); got != test.parent {
				t.Errorf("server span %q: parent %s, want the caller's %s", server.Name(), got, test.parent)
			}
			if !hasAttr(server.Attributes(), test.wantAttr) {
				t.Errorf("server span %q lacks %v: %v", server.Name(), test.wantAttr, server.Attributes())
			}
			if !hasAttr(server.Attributes(), attribute.String("sheba.api_key_id", testKeyID)) {
				t.Errorf("server span %q lacks the caller's key id: %v", server.Name(), server.Attributes())
			}
			sql := 0
			for _, s := range inTrace {
				if hasAttr(s.Attributes, attribute.String("db.system", "postgresql")) && s.Parent.SpanID() == server.SpanContext().SpanID() {
					sql++
				}
			}
			if sql == 0 {
				t.Errorf("no SQL span with db.system=postgresql under the server span; trace has %s", spanNames(inTrace))
			}
		})
	}
}

// TestRESTSpans checks the HTTP server span of REST calls: its name, the
// standard attributes, and an error status only for a 5xx.
func TestRESTSpans(t *testing.T) {
	t.Parallel()
	tp, exp := newRecorder(t)
	e := newTestEnvWith(t, tp, []app.Option{withHandlerHook(func(_ context.Context, method string) error {
		if method == "/sheba.v1.SubscriptionService/ListSubscriptions" {
			return errors.New("boom")
		}
		return nil
	})})
	id := e.newAccount(t, "lisa")

	for _, test := range []struct {
		traceID, path string
		wantName      string
		wantCode      int
		wantRoute     string
		wantError     bool
	}{
		{"6bf92f3577b34da6a3ce929d0e0e4701", "/v1/accounts/" + id, "GET /v1/accounts/{accountId}", http.StatusOK, "/v1/accounts/{accountId}", false},
		{"6bf92f3577b34da6a3ce929d0e0e4702", "/v1/no-such-route", "GET", http.StatusNotFound, "", false},
		{"6bf92f3577b34da6a3ce929d0e0e4703", "/v1/subscriptions", "GET /v1/subscriptions", http.StatusInternalServerError, "/v1/subscriptions", true},
	} {
		t.Run(test.path, func(t *testing.T) {
			wantCode(t, e.do(t, http.MethodGet, test.path, "", "Traceparent", "00-"+test.traceID+"-00f067aa0ba902b7-01", "User-Agent", "span-test/1"), test.wantCode)
			var server *tracetest.SpanStub
			for _, s := range exp.GetSpans() {
				if s.SpanContext.TraceID().String() == test.traceID && s.SpanKind == trace.SpanKindServer {
					server = &s
				}
			}
			if server == nil {
				t.Fatalf("no server span in trace %s", test.traceID)
			}
			if server.Name != test.wantName {
				t.Errorf("span name: got %q, want %q", server.Name, test.wantName)
			}
			for _, want := range []attribute.KeyValue{
				attribute.String("http.request.method", "GET"),
				attribute.String("url.path", test.path),
				attribute.Int("http.response.status_code", test.wantCode),
				attribute.String("user_agent.original", "span-test/1"),
				attribute.String("client.address", "127.0.0.1"),
			} {
				if !hasAttr(server.Attributes, want) {
					t.Errorf("span %q lacks %v: %v", server.Name, want, server.Attributes)
				}
			}
			route, hasRoute := attrValue(server.Attributes, "http.route")
			if route != test.wantRoute || hasRoute != (test.wantRoute != "") {
				t.Errorf("http.route: got %q (present %v), want %q", route, hasRoute, test.wantRoute)
			}
			if got := server.Status.Code == codes.Error; got != test.wantError {
				t.Errorf("span status: got %v, want error %v", server.Status, test.wantError)
			}
		})
	}
}

func attrValue(attrs []attribute.KeyValue, key attribute.Key) (string, bool) {
	for _, a := range attrs {
		if a.Key == key {
			return a.Value.Emit(), true
		}
	}
	return "", false
}

// TestExemplars checks that a sampled call leaves its trace id as an
// exemplar of the handling-time histogram, in the OpenMetrics exposition.
func TestExemplars(t *testing.T) {
	t.Parallel()
	tp, _ := newRecorder(t)
	e := newTestEnvWith(t, tp, nil)
	const traceID = "8bf92f3577b34da6a3ce929d0e0e473a"
	ctx := metadata.AppendToOutgoingContext(t.Context(), "traceparent", "00-"+traceID+"-40f067aa0ba902bb-01")
	if _, err := e.ping.Ping(ctx, &shebav1.PingRequest{}); err != nil {
		t.Fatal(err)
	}
	r := e.do(t, http.MethodGet, "/metrics", "", "Accept", "application/openmetrics-text; version=1.0.0")
	wantCode(t, r, http.StatusOK)
	found := false
	for line := range strings.SplitSeq(string(r.Body), "\n") {
		if strings.HasPrefix(line, "grpc_server_handling_seconds_bucket{") && strings.Contains(line, `grpc_method="Ping"`) && strings.Contains(line, `# {trace_id="`+traceID+`"}`) {
			found = true
		}
	}
	if !found {
		t.Errorf("no grpc_server_handling_seconds bucket of Ping carries exemplar trace_id %s", traceID)
	}
}

func hasAttr(attrs []attribute.KeyValue, want attribute.KeyValue) bool {
	for _, a := range attrs {
		if a.Key == want.Key && a.Value == want.Value {
			return true
		}
	}
	return false
}

func spanNames(spans []tracetest.SpanStub) string {
	var names []string
	for _, s := range spans {
		names = append(names, s.Name+"("+s.SpanKind.String()+")")
	}
	return strings.Join(names, ", ")
}

// TestRequestLog checks the one JSON line per request: it parses, and it
// carries the request id that was sent, the caller and the trace; no
// password or key is written.
func TestRequestLog(t *testing.T) {
	t.Parallel()
	tp, _ := newRecorder(t)
	e := newTestEnvWith(t, tp, nil)
	const password = "Tr0ub4dor&3-secret"
	r := e.do(t, http.MethodPost, "/v1/accounts", `{"username":"nina","password":"`+password+`"}`,
		"X-Request-Id", "req-rest-1", "Traceparent", "00-6bf92f3577b34da6a3ce929d0e0e4738-20f067aa0ba902b9-01")
	wantCode(t, r, http.StatusOK)
	if got := r.Header.Get("X-Request-Id"); got != "req-rest-1" {
		t.Errorf("X-Request-Id response header: got %q, want req-rest-1", got)
	}
	var header metadata.MD
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-request-id", "req-grpc-2")
	_, err := e.account.Login(ctx, &shebav1.LoginRequest{Username: "nina", Password: password}, grpc.Header(&header))
	if err != nil {
		t.Fatalf("Login: %v", err)
	}
	if got := header.Get("x-request-id"); len(got) != 1 || got[0] != "req-grpc-2" {
		t.Errorf("x-request-id response metadata: got %q, want req-grpc-2", got)
	}
	// Without one, the server makes one.
	if got := e.do(t, http.MethodGet, "/v1/ping", "").Header.Get("X-Request-Id"); got == "" {
		t.Error("no X-Request-Id made for a request without one")
	}

	lines := map[string]map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(e.logs.String()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", sc.Text())
		}
		if m["msg"] == "request" {
			lines[m["request_id"].(string)] = m
		}
	}
	rest, grpcLine := lines["req-rest-1"], lines["req-grpc-2"]
	if rest == nil || grpcLine == nil {
		t.Fatalf("no request lines for the ids sent; log:\n%s", e.logs.String())
	}
	for k, want := range map[string]any{
		"method": "/sheba.v1.AccountService/CreateAccount", "transport": "rest", "code": "OK",
		"api_key_id": testKeyID, "trace_id": "6bf92f3577b34da6a3ce929d0e0e4738",
	} {
		if rest[k] != want {
			t.Errorf("REST line %s: got %v, want %v", k, rest[k], want)
		}
	}
	for k, want := range map[string]any{"method": "/sheba.v1.AccountService/Login", "transport": "grpc", "code": "OK", "api_key_id": testKeyID} {
		if grpcLine[k] != want {
			t.Errorf("gRPC line %s: got %v, want %v", k, grpcLine[k], want)
		}
	}
	for _, k := range []string{"duration", "span_id", "peer"} {
		if rest[k] == nil || rest[k] == "" {
			t.Errorf("REST line has no %s: %v", k, rest)
		}
	}
	if logs := e.logs.String(); strings.Contains(logs, password) || strings.Contains(logs, testKey) {
		t.Error("the log contains a password or an API key")
	}
}
