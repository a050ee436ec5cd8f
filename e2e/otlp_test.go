package e2e

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP trace receiver on 127.0.0.1 that keeps what
// it is sent.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	attrs map[string]string // resource attributes, last seen
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	var msg collectortrace.ExportTraceServiceRequest
	if err != nil || req.URL.Path != "/v1/traces" || proto.Unmarshal(body, &msg) != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range msg.GetResourceSpans() {
		r.attrs = map[string]string{}
		for _, a := range rs.GetResource().GetAttributes() {
			r.attrs[a.GetKey()] = a.GetValue().GetStringValue()
		}
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// TestOTLPExport runs sheba with the standard OTEL_* variables pointing at a
// local OTLP/HTTP receiver: a REST call with a traceparent reaches it, in the
// caller's trace, with its SQL span, flushed by the time sheba exits.
func TestOTLPExport(t *testing.T) {
	recv := &otlpReceiver{}
	collector := httptest.NewServer(recv)
	defer collector.Close()

	p := startSheba(t,
		"OTEL_EXPORTER_OTLP_ENDPOINT="+collector.URL,
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_TRACES_SAMPLER=parentbased_always_on",
		"OTEL_SERVICE_NAME=sheba-under-test",
		`SHEBA_AUTH_KEYS=[{"id":"dev","sha256":"e4ccd6ac185343fd6cf8ef200416646ae7487fcf6c898a6b032991dafa06e8df"}]`,
	)
	const traceID = "7bf92f3577b34da6a3ce929d0e0e4739"
	req, _ := http.NewRequest(http.MethodPost, "http://"+p.HTTPAddr+"/v1/accounts", strings.NewReader(`{"username":"olga","password":"password1"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", "sheba-dev-key-not-a-secret")
	req.Header.Set("Traceparent", "00-"+traceID+"-30f067aa0ba902ba-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/accounts: got %d, want 200", resp.StatusCode)
	}
	// Exiting flushes the batch.
	if code := p.Stop(t); code != 0 {
		t.Fatalf("exit status %d after SIGTERM, want 0; log:\n%s", code, p.Logs())
	}

	recv.mu.Lock()
	defer recv.mu.Unlock()
	var server *tracepb.Span
	for _, s := range recv.spans {
		if hex.EncodeToString(s.GetTraceId()) == traceID && s.GetKind() == tracepb.Span_SPAN_KIND_SERVER {
			server = s
		}
	}
	if server == nil {
		t.Fatalf("no server span of trace %s among %d exported spans; log:\n%s", traceID, len(recv.spans), p.Logs())
	}
	if got := hex.EncodeToString(server.GetParentSpanId()); got != "30f067aa0ba902ba" {
		t.Errorf("server span parent: got %s, want the caller's span", got)
	}
	sql := 0
	for _, s := range recv.spans {
		if hex.EncodeToString(s.GetTraceId()) != traceID || string(s.GetParentSpanId()) != string(server.GetSpanId()) {
			continue
		}
		for _, a := range s.GetAttributes() {
			if a.GetKey() == "db.system" && a.GetValue().GetStringValue() == "postgresql" {
				sql++
			}
		}
	}
	if sql == 0 {
		t.Errorf("no span with db.system=postgresql under the server span")
	}
	if got := recv.attrs["service.name"]; got != "sheba-under-test" {
		t.Errorf("service.name: got %q, want OTEL_SERVICE_NAME", got)
	}
}
