package requestlog_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/interceptors/callinfo"
	"github.com/shebasvc/sheba/interceptors/requestlog"
)

// lineCall is one call as the interceptor sees it, odd values included.
type lineCall struct {
	name                   string
	at                     time.Time
	took                   time.Duration
	method                 string
	transport, peer        string
	requestID              string // sent as x-request-id: kept if sane
	callerID, hook, hookEr string
	traced                 bool
	err                    error
	planned                bool // the error is a planned end (Info, not Warn)
}

var (
	odd     = "quo\"te back\\slash <b>&amp; nul\x00 bel\x07 bs\x08 ff\x0c nl\n cr\r tab\t us\x1f del\x7f é 😀 \u2028\u2029"
	invalid = "/sheba.v1.Svc/\xff\xfeDo\xc3"
	t0      = time.Date(2026, 12, 6, 22, 50, 1, 123456789, time.UTC)
)

func lineCalls() []lineCall {
	return []lineCall{
		{name: "ok", at: t0, took: 139397 * time.Nanosecond, method: "/sheba.v1.PingService/Ping", transport: "rest", peer: "127.0.0.1", requestID: "req-1", callerID: "billing"},
		{name: "not found", at: t0, took: time.Millisecond, method: "/sheba.v1.AccountService/GetAccount", transport: "grpc", peer: "127.0.0.1:5000", requestID: "req-2", err: status.Error(codes.NotFound, "account not found")},
		{name: "internal", at: t0, took: 35050990, method: "/sheba.v1.AccountService/Login", transport: "connect", requestID: "req-3", err: status.Error(codes.Internal, "internal error")},
		{name: "planned end", at: t0, took: 5 * time.Minute, method: "/sheba.v1.EventService/StreamEvents", transport: "grpc-web", requestID: "req-4", err: status.Error(codes.Unavailable, "stream ended"), planned: true},
		{name: "unavailable", at: t0, took: time.Second, method: "/m", transport: "grpc", requestID: "req-5", err: status.Error(codes.Unavailable, "database unavailable")},
		{name: "plain error", at: t0, took: 1, method: "/m", transport: "grpc", requestID: "req-6", err: errors.New("plain " + odd)},
		{name: "empty message", at: t0, method: "/m", transport: "grpc", requestID: "req-7", err: status.Error(codes.DeadlineExceeded, "")},
		{name: "odd values", at: t0, took: 42, method: odd, transport: odd, peer: odd, requestID: `a"b\c<d>&e`, callerID: odd, hook: odd, hookEr: odd, err: status.Error(codes.InvalidArgument, odd)},
		{name: "invalid UTF-8", at: t0, took: 42, method: invalid, transport: "rest", peer: "\xff", requestID: "req-8", callerID: "\xe2\x80", hook: "error", hookEr: "hook answered \xc0\xaf", err: status.Error(codes.FailedPrecondition, invalid)},
		{name: "hook and trace", at: t0, took: 77, method: "/m", transport: "rest", peer: "10.0.0.7, 127.0.0.1", requestID: "req-9", callerID: "k", hook: "error", hookEr: "hook answered status 500", traced: true, err: status.Error(codes.Unavailable, "try later")},
		{name: "traced ok", at: t0, took: 77, method: "/m", transport: "rest", requestID: "req-10", traced: true},
		{name: "long duration", at: t0, took: 300*time.Hour + 1, method: "/m", transport: "grpc", requestID: "req-11"},
		{name: "clock went back", at: t0, took: -3 * time.Second, method: "/m", transport: "grpc", requestID: "req-12"},
		{name: "whole second", at: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), took: 1, method: "/m", transport: "grpc", requestID: "req-13"},
		{name: "zone", at: time.Date(2026, 7, 1, 0, 0, 0, 1000, time.FixedZone("", -(3*3600+30*60))), took: 1, method: "/m", transport: "grpc", requestID: "req-14"},
		{name: "local time with monotonic reading", at: time.Now(), took: 1, method: "/m", transport: "grpc", requestID: "req-15"},
		{name: "year 9999", at: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), took: 1, method: "/m", transport: "grpc", requestID: "req-16"},
		{name: "year 10000", at: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), took: 1, method: "/m", transport: "grpc", requestID: "req-17"},
		{name: "year -1", at: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), took: 1, method: "/m", transport: "grpc", requestID: "req-18"},
		{name: "zero time", took: 1, method: "/m", transport: "grpc", requestID: "req-20"},
		{name: "long values", at: t0, took: 1, method: "/" + strings.Repeat("m\"", 10000), transport: "grpc", requestID: "req-19", err: status.Error(codes.InvalidArgument, strings.Repeat("é\n", 5000))},
	}
}

// run makes c through an interceptor logging to h and returns what h wrote.
func (c lineCall) run(t *testing.T, h slog.Handler, buf *bytes.Buffer) []byte {
	t.Helper()
	buf.Reset()
	clock := 0
	now := func() time.Time {
		// The interceptor reads the clock at the start and at the end.
		clock++
		if clock%2 == 1 {
			return c.at.Add(-c.took)
		}
		return c.at
	}
	i := requestlog.UnaryServerInterceptor(slog.New(h),
		requestlog.WithClock(now),
		requestlog.WithTransport(func(context.Context) (string, string) { return c.transport, c.peer }),
		requestlog.WithPlannedEnds(func(error) bool { return c.planned }))
	ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs("x-request-id", c.requestID))
	if c.traced {
		ctx = trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{0x6b, 0xf9, 15: 0x38}, SpanID: trace.SpanID{0x20, 7: 0xb9},
		}))
	}
	_, _ = i(ctx, nil, &grpc.UnaryServerInfo{FullMethod: c.method}, func(ctx context.Context, _ any) (any, error) {
		ci := callinfo.FromContext(ctx)
		ci.CallerID, ci.Hook, ci.HookError = c.callerID, c.hook, c.hookEr
		return nil, c.err
	})
	return bytes.Clone(buf.Bytes())
}

// jsonTokens is a line read as JSON, token by token: keys and values in
// their order.
func jsonTokens(t *testing.T, line []byte) []string {
	t.Helper()
	var tokens []string
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return tokens
		}
		if err != nil {
			t.Fatalf("not JSON: %v: %q", err, line)
		}
		tokens = append(tokens, fmt.Sprintf("%T %v", tok, tok))
	}
}

// TestSameAsSlog: on requestlog's JSONHandler the line is written without
// slog, and it is what slog's JSONHandler writes for the same call, to the
// byte, at every level and for odd values.
func TestSameAsSlog(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError} {
		opts := &slog.HandlerOptions{Level: level}
		var want, got bytes.Buffer
		slogHandler, ours := slog.NewJSONHandler(&want, opts), requestlog.NewJSONHandler(&got, opts)
		lines := 0
		for _, c := range lineCalls() {
			t.Run(level.String()+"/"+c.name, func(t *testing.T) {
				w, g := c.run(t, slogHandler, &want), c.run(t, ours, &got)
				if len(w) > 0 {
					lines++
				}
				// slog's own line is no JSON for a year RFC 3339 cannot
				// hold; the bytes are still compared.
				if json.Valid(w) {
					if diff := cmp.Diff(jsonTokens(t, w), jsonTokens(t, g)); diff != "" {
						t.Errorf("fields (-slog +requestlog):\n%s", diff)
					}
				}
				if !bytes.Equal(w, g) {
					t.Errorf("line:\n slog:       %q\n requestlog: %q", w, g)
				}
			})
		}
		// The levels filter: Debug and Info write every call, Warn the
		// failures, Error none.
		if wantLines := map[slog.Level]int{slog.LevelDebug: 21, slog.LevelInfo: 21, slog.LevelWarn: 5, slog.LevelError: 0}[level]; lines != wantLines {
			t.Errorf("%v: %d lines written, want %d", level, lines, wantLines)
		}
	}
}

// TestJSONHandlerIsSlogs: what changes slog's line (ReplaceAttr, attributes
// bound with With) is honoured for the request line too, and other lines are
// slog's.
func TestJSONHandlerIsSlogs(t *testing.T) {
	c := lineCalls()[0]
	dropTime := &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}
	for _, test := range []struct {
		name  string
		slog  func(w io.Writer) slog.Handler
		ours  func(w io.Writer) slog.Handler
		wants string
	}{
		{"ReplaceAttr", func(w io.Writer) slog.Handler { return slog.NewJSONHandler(w, dropTime) },
			func(w io.Writer) slog.Handler { return requestlog.NewJSONHandler(w, dropTime) }, `{"level":"INFO"`},
		{"With", func(w io.Writer) slog.Handler {
			return slog.New(slog.NewJSONHandler(w, nil)).With("replica", "r1").Handler()
		},
			func(w io.Writer) slog.Handler {
				return slog.New(requestlog.NewJSONHandler(w, nil)).With("replica", "r1").Handler()
			}, `"msg":"request","replica":"r1",`},
		{"WithGroup", func(w io.Writer) slog.Handler { return slog.NewJSONHandler(w, nil).WithGroup("g") },
			func(w io.Writer) slog.Handler { return requestlog.NewJSONHandler(w, nil).WithGroup("g") }, `"msg":"request","g":{"method"`},
		{"AddSource", func(w io.Writer) slog.Handler { return slog.NewJSONHandler(w, &slog.HandlerOptions{AddSource: true}) },
			func(w io.Writer) slog.Handler {
				return requestlog.NewJSONHandler(w, &slog.HandlerOptions{AddSource: true})
			}, `"msg":"request","method"`}, // no program counter: no source
	} {
		t.Run(test.name, func(t *testing.T) {
			var want, got bytes.Buffer
			w, g := c.run(t, test.slog(&want), &want), c.run(t, test.ours(&got), &got)
			if !bytes.Equal(w, g) {
				t.Errorf("line:\n slog:       %q\n requestlog: %q", w, g)
			}
			if !bytes.Contains(g, []byte(test.wants)) {
				t.Errorf("line %q has no %s", g, test.wants)
			}
		})
	}
}

// TestLinesWhole: request lines and slog's other lines, written at once from
// several goroutines, come out whole, one per line.
func TestLinesWhole(t *testing.T) {
	var buf bytes.Buffer
	h := requestlog.NewJSONHandler(&buf, nil)
	log := slog.New(h)
	i := requestlog.UnaryServerInterceptor(log)
	info := &grpc.UnaryServerInfo{FullMethod: "/pkg.Svc/Do"}
	const goroutines, calls = 4, 100
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range calls {
				_, _ = i(t.Context(), nil, info, func(context.Context, any) (any, error) { return nil, nil })
				log.With("g", g).Info("other", "long", strings.Repeat("x", 2000))
			}
		})
	}
	wg.Wait()
	msgs := map[string]int{}
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("not JSON: %q", sc.Bytes())
		}
		msgs[m["msg"].(string)]++
	}
	if diff := cmp.Diff(map[string]int{"request": goroutines * calls, "other": goroutines * calls}, msgs); diff != "" {
		t.Errorf("lines by msg (-want +got):\n%s", diff)
	}
}

// BenchmarkLine is one call's line (a REST ping's: no trace, no error),
// through slog's JSONHandler and requestlog's; "no-line" is the interceptor
// with its line filtered out by the level, what the others cost without it.
func BenchmarkLine(b *testing.B) {
	for _, bench := range []struct {
		name string
		h    slog.Handler
	}{
		{"no-line", requestlog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn})},
		{"slog-json", slog.NewJSONHandler(io.Discard, nil)},
		{"requestlog-json", requestlog.NewJSONHandler(io.Discard, nil)},
	} {
		b.Run(bench.name, func(b *testing.B) {
			i := requestlog.UnaryServerInterceptor(slog.New(bench.h),
				requestlog.WithTransport(func(context.Context) (string, string) { return "rest", "127.0.0.1" }))
			info := &grpc.UnaryServerInfo{FullMethod: "/sheba.v1.PingService/Ping"}
			base := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-request-id", "2X2MFDUFRFLJD42TIAI3NDUQW4"))
			handler := func(ctx context.Context, _ any) (any, error) {
				callinfo.FromContext(ctx).CallerID = "billing-svc"
				return nil, nil
			}
			b.ReportAllocs()
			for b.Loop() {
				var ci callinfo.Info
				_, _ = i(callinfo.NewContext(base, &ci), nil, info, handler)
			}
		})
	}
}
