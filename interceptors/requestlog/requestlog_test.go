package requestlog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/trace"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/callinfo"
	"github.com/shebasvc/sheba/interceptors/interceptortest"
	"github.com/shebasvc/sheba/interceptors/requestlog"
)

func logLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not JSON: %q", l)
		}
		lines = append(lines, m)
	}
	return lines
}

func TestDirect(t *testing.T) {
	var buf bytes.Buffer
	i := requestlog.UnaryServerInterceptor(slog.New(slog.NewJSONHandler(&buf, nil)))
	info := &grpc.UnaryServerInfo{FullMethod: "/pkg.Svc/Do"}
	for _, test := range []struct {
		name, sent string
		keep       bool
		err        error
		level      string
	}{
		{"id kept", "abc-123", true, nil, "INFO"},
		{"no id", "", false, status.Error(codes.NotFound, "nope"), "INFO"},
		{"id with space", "a b", false, nil, "INFO"},
		{"id too long", strings.Repeat("x", 129), false, status.Error(codes.Internal, "internal error"), "WARN"},
	} {
		t.Run(test.name, func(t *testing.T) {
			buf.Reset()
			ctx := t.Context()
			if test.sent != "" {
				ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("x-request-id", test.sent))
			}
			var seen string
			_, err := i(ctx, nil, info, func(ctx context.Context, _ any) (any, error) {
				ci := callinfo.FromContext(ctx)
				seen = ci.RequestID
				ci.CallerID = "billing" // as the identify step does
				return nil, test.err
			})
			if err != test.err {
				t.Errorf("error: got %v, want the handler's %v", err, test.err)
			}
			if test.keep && seen != test.sent {
				t.Errorf("request id: got %q, want %q", seen, test.sent)
			}
			if !test.keep && (seen == "" || seen == test.sent) {
				t.Errorf("request id: got %q, want a new one", seen)
			}
			lines := logLines(t, &buf)
			if len(lines) != 1 {
				t.Fatalf("got %d log lines, want 1", len(lines))
			}
			l := lines[0]
			for k, want := range map[string]any{"request_id": seen, "method": "/pkg.Svc/Do", "code": status.Code(test.err).String(), "api_key_id": "billing", "level": test.level, "transport": "grpc"} {
				if l[k] != want {
					t.Errorf("%s: got %v, want %v", k, l[k], want)
				}
			}
		})
	}
}

// TestPlannedEnds: an error WithPlannedEnds names is logged at Info
// whatever its code; another of the same code stays at Warn.
func TestPlannedEnds(t *testing.T) {
	planned := status.Error(codes.Unavailable, "stream ended after events.max_duration")
	var buf bytes.Buffer
	i := requestlog.UnaryServerInterceptor(slog.New(slog.NewJSONHandler(&buf, nil)),
		requestlog.WithPlannedEnds(func(err error) bool { return err == planned }))
	info := &grpc.UnaryServerInfo{FullMethod: "/pkg.Svc/Stream"}
	for _, err := range []error{planned, status.Error(codes.Unavailable, "database unavailable")} {
		_, _ = i(t.Context(), nil, info, func(context.Context, any) (any, error) { return nil, err })
	}
	var got []string
	for _, l := range logLines(t, &buf) {
		got = append(got, l["level"].(string)+" "+l["error"].(string))
	}
	want := []string{"INFO stream ended after events.max_duration", "WARN database unavailable"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("levels (-want +got):\n%s", diff)
	}
}

// TestServer checks that the id goes back to the client as metadata, with
// what inner steps left in the call's Info.
func TestServer(t *testing.T) {
	var buf bytes.Buffer
	inner := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ci := callinfo.FromContext(ctx)
		for _, kv := range [][2]string{{"x-a", "1"}, {"x-b", "2"}, {"x-a", "3"}, {"x-c", "4"}, {"x-d", "5"}, {"x-e", "6"}} {
			ci.SetHeader(kv[0], kv[1])
		}
		return handler(ctx, req)
	}
	client := interceptortest.ServeWith(t, []grpc.ServerOption{grpc.ChainUnaryInterceptor(
		requestlog.UnaryServerInterceptor(slog.New(slog.NewJSONHandler(&buf, nil))), inner,
	)}, interceptortest.Pong)
	var header metadata.MD
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-request-id", "from-client")
	if _, err := client.Ping(ctx, &shebav1.PingRequest{}, grpc.Header(&header)); err != nil {
		t.Fatal(err)
	}
	if got := header.Get("x-request-id"); len(got) != 1 || got[0] != "from-client" {
		t.Errorf("x-request-id: got %q, want from-client", got)
	}
	for k, want := range map[string][]string{"x-a": {"1", "3"}, "x-b": {"2"}, "x-c": {"4"}, "x-d": {"5"}, "x-e": {"6"}} {
		if diff := cmp.Diff(want, header.Get(k)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", k, diff)
		}
	}
	if l := logLines(t, &buf); len(l) != 1 || l[0]["peer"] != "" {
		// Without WithTransport the peer is unknown.
		t.Errorf("log lines: %v", l)
	}
}

// TestTraceIDs checks that the line names the call's trace and span, sampled
// or not, and the hook's outcome and the error when there are some.
func TestTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	i := requestlog.UnaryServerInterceptor(slog.New(slog.NewJSONHandler(&buf, nil)))
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x0a, 0xf1, 15: 0x01}, SpanID: trace.SpanID{0xbe, 7: 0xef},
	})
	ctx := trace.ContextWithSpanContext(t.Context(), sc)
	_, _ = i(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/pkg.Svc/Do"}, func(ctx context.Context, _ any) (any, error) {
		ci := callinfo.FromContext(ctx)
		ci.Hook, ci.HookError = "error", "hook unreachable"
		return nil, status.Error(codes.Unavailable, "try later")
	})
	lines := logLines(t, &buf)
	if len(lines) != 1 {
		t.Fatalf("got %d log lines, want 1", len(lines))
	}
	l := lines[0]
	for k, want := range map[string]any{
		"trace_id": "0af10000000000000000000000000001", "span_id": "be000000000000ef",
		"hook": "error", "hook_error": "hook unreachable", "error": "try later", "level": "WARN",
	} {
		if l[k] != want {
			t.Errorf("%s: got %v, want %v", k, l[k], want)
		}
	}
}
