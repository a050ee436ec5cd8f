package hook

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// httpTestCall is a call as the interceptor makes them.
func httpTestCall() *Call {
	return &Call{
		ID:        "req-1",
		Transport: TransportREST,
		Method:    "/sheba.v1.SubscriptionService/CreateSubscription",
		CallerID:  "billing-svc",
		Headers:   map[string][]string{"user-agent": {"curl/8.5.0"}},
		Body:      &shebav1.CreateSubscriptionRequest{AccountId: "a1", Plan: "pro"},
	}
}

// newHTTPTestHook serves answer over HTTP/1.1 and returns a client of it.
func newHTTPTestHook(t testing.TB, answer http.HandlerFunc) *HTTPClient {
	t.Helper()
	srv := httptest.NewServer(answer)
	t.Cleanup(srv.Close)
	return newHTTPTestClient(t, srv.URL, HTTPOptions{})
}

func newHTTPTestClient(t testing.TB, rawURL string, o HTTPOptions) *HTTPClient {
	t.Helper()
	c, err := NewHTTPClient(rawURL, o)
	if err != nil {
		t.Fatalf("NewHTTPClient(%q): %v", rawURL, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// answerJSON answers 200 with body.
func answerJSON(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body)
	}
}

const httpTestContinue = `{"control":"continue"}`

func TestHTTPClientRequest(t *testing.T) {
	for _, test := range []struct {
		name string
		call *Call
		want map[string]any
	}{
		{
			name: "rest call with caller, headers and body",
			call: httpTestCall(),
			want: map[string]any{
				"version":   1.0,
				"stage":     "request",
				"id":        "req-1",
				"transport": "rest",
				"method":    "/sheba.v1.SubscriptionService/CreateSubscription",
				"caller":    map[string]any{"apiKeyId": "billing-svc"},
				"headers":   map[string]any{"user-agent": []any{"curl/8.5.0"}},
				"body":      map[string]any{"accountId": "a1", "plan": "pro"},
			},
		},
		{
			name: "grpc call without caller, headers or body",
			call: &Call{ID: "req-2", Transport: TransportGRPC, Method: "/sheba.v1.PingService/Ping"},
			want: map[string]any{
				"version":   1.0,
				"stage":     "request",
				"id":        "req-2",
				"transport": "grpc",
				"method":    "/sheba.v1.PingService/Ping",
			},
		},
		{
			name: "strings that need escaping",
			call: &Call{
				ID:        "a\"b\\c\nd\x01\x7f",
				Transport: TransportREST,
				Method:    "/m",
				CallerID:  "caf\u00e9 \U0001F600",
				Headers: map[string][]string{
					"x-note":  {`say "hi"`, "tab\there", "bad\xffutf8"},
					"x-empty": {},
				},
			},
			want: map[string]any{
				"version":   1.0,
				"stage":     "request",
				"id":        "a\"b\\c\nd\x01\x7f",
				"transport": "rest",
				"method":    "/m",
				"caller":    map[string]any{"apiKeyId": "caf\u00e9 \U0001F600"},
				"headers": map[string]any{
					"x-note":  []any{`say "hi"`, "tab\there", "bad\ufffdutf8"},
					"x-empty": []any{},
				},
			},
		},
		{
			name: "empty body message",
			call: &Call{ID: "req-3", Transport: TransportGRPC, Method: "/m", Body: &shebav1.CreateSubscriptionRequest{}},
			want: map[string]any{
				"version":   1.0,
				"stage":     "request",
				"id":        "req-3",
				"transport": "grpc",
				"method":    "/m",
				"body":      map[string]any{},
			},
		},
	} {
		t.Run(test.name, func(t *testing.T) {
			got := make(chan *http.Request, 1)
			gotBody := make(chan []byte, 1)
			c := newHTTPTestHook(t, func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				got <- r
				gotBody <- b
				io.WriteString(w, httpTestContinue)
			})
			if _, err := c.Check(context.Background(), test.call); err != nil {
				t.Fatalf("Check: %v", err)
			}
			r, body := <-got, <-gotBody
			if r.Method != http.MethodPost {
				t.Errorf("got method %s, want POST", r.Method)
			}
			if ct := r.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("got Content-Type %q, want application/json", ct)
			}
			var sent map[string]any
			if err := json.Unmarshal(body, &sent); err != nil {
				t.Fatalf("request %s is not JSON: %v", body, err)
			}
			if diff := cmp.Diff(test.want, sent); diff != "" {
				t.Errorf("request mismatch (-want +got):\n%s\nrequest: %s", diff, body)
			}
		})
	}
}

func TestHTTPClientReusesConnections(t *testing.T) {
	for _, scheme := range []string{"http", "h2c"} {
		t.Run(scheme, func(t *testing.T) {
			var conns atomic.Int32
			srv := httptest.NewUnstartedServer(answerJSON(httpTestContinue))
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			if scheme == "h2c" {
				srv.Config.Protocols = new(http.Protocols)
				srv.Config.Protocols.SetUnencryptedHTTP2(true)
			}
			srv.Start()
			t.Cleanup(srv.Close)
			c := newHTTPTestClient(t, scheme+"://"+srv.Listener.Addr().String()+"/hook", HTTPOptions{})
			for i := range 5 {
				if _, err := c.Check(context.Background(), httpTestCall()); err != nil {
					t.Fatalf("Check %d: %v", i, err)
				}
			}
			if got := conns.Load(); got != 1 {
				t.Errorf("got %d connections for 5 sequential calls, want 1", got)
			}
		})
	}
}

func TestHTTPClientConcurrent(t *testing.T) {
	c := newHTTPTestHook(t, func(w http.ResponseWriter, r *http.Request) {
		var call struct{ ID string }
		if err := json.NewDecoder(r.Body).Decode(&call); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		// Each answer names its call, so that answers mixed up between
		// calls show.
		fmt.Fprintf(w, `{"control":"continue","responseHeaders":{"x-id":[%q]}}`, call.ID)
	})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				call := httpTestCall()
				call.ID = fmt.Sprintf("req-%d-%d", g, i)
				d, err := c.Check(context.Background(), call)
				if err != nil {
					t.Errorf("Check %s: %v", call.ID, err)
					return
				}
				if got := d.ResponseHeaders["x-id"]; len(got) != 1 || got[0] != call.ID {
					t.Errorf("got x-id %q, want [%q]", got, call.ID)
				}
			}
		})
	}
	wg.Wait()
}

func TestHTTPClientDecisions(t *testing.T) {
	for _, test := range []struct {
		name   string
		answer string
		want   Decision
	}{
		{
			name:   "continue",
			answer: `{"control":"continue"}`,
			want:   Decision{},
		},
		{
			name:   "continue with body, headers and cache",
			answer: `{"control":"continue","body":{"accountId":"a1","plan":"pro-trial"},"responseHeaders":{"x-plan-rule":["trial"]},"cacheSeconds":30}`,
			want: Decision{
				Body:            json.RawMessage(`{"accountId":"a1","plan":"pro-trial"}`),
				ResponseHeaders: map[string][]string{"x-plan-rule": {"trial"}},
				CacheFor:        30 * time.Second,
			},
		},
		{
			name:   "break",
			answer: `{"control":{"break":403},"message":"plans are closed in this region","reason":"REGION_CLOSED"}`,
			want:   Decision{Break: 403, Message: "plans are closed in this region", Reason: "REGION_CLOSED"},
		},
		{
			name:   "break with headers and a fractional cache",
			answer: `{"control":{"break":429},"responseHeaders":{"retry-after":["2"]},"cacheSeconds":1.5}`,
			want: Decision{
				Break:           429,
				ResponseHeaders: map[string][]string{"retry-after": {"2"}},
				CacheFor:        1500 * time.Millisecond,
			},
		},
		{
			name:   "lowest and highest break",
			answer: `{"control":{"break":400}}`,
			want:   Decision{Break: 400},
		},
		{
			name:   "highest break",
			answer: `{"control":{"break":599}}`,
			want:   Decision{Break: 599},
		},
		{
			name:   "null body and headers are absent",
			answer: `{"control":"continue","body":null,"responseHeaders":null}`,
			want:   Decision{},
		},
		{
			name:   "null body with a break",
			answer: `{"control":{"break":404},"body":null}`,
			want:   Decision{Break: 404},
		},
		{
			name:   "message and reason of a continue are ignored",
			answer: `{"control":"continue","message":"m","reason":"R"}`,
			want:   Decision{},
		},
		{
			name:   "unknown fields are ignored",
			answer: `{"version":2,"control":"continue","future":{"x":[1,2]}}`,
			want:   Decision{},
		},
		{
			name:   "header names are lowercased",
			answer: `{"control":"continue","responseHeaders":{"X-Plan-Rule":["a","b"],"x-empty":[]}}`,
			want:   Decision{ResponseHeaders: map[string][]string{"x-plan-rule": {"a", "b"}, "x-empty": nil}},
		},
		{
			name:   "control written with escapes",
			answer: `{"control":"\u0063ontinue"}`,
			want:   Decision{},
		},
		{
			name:   "zero cache",
			answer: `{"control":"continue","cacheSeconds":0}`,
			want:   Decision{},
		},
		{
			name:   "whitespace",
			answer: " {\n \"control\" : { \"break\" : 401 } ,\n \"body\" : null }\n",
			want:   Decision{Break: 401},
		},
	} {
		t.Run(test.name, func(t *testing.T) {
			c := newHTTPTestHook(t, answerJSON(test.answer))
			got, err := c.Check(context.Background(), httpTestCall())
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if diff := cmp.Diff(test.want, got); diff != "" {
				t.Errorf("decision mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHTTPClientBadAnswers(t *testing.T) {
	tooLarge := `{"control":"continue","pad":"` + strings.Repeat("x", httpMaxAnswerBytes) + `"}`
	for _, test := range []struct {
		name    string
		status  int
		answer  string
		chunked bool // no Content-Length: the bound holds while reading
		wantErr string
	}{
		{name: "status 500", status: 500, answer: httpTestContinue, wantErr: "status 500"},
		{name: "status 204", status: 204, wantErr: "status 204"},
		{name: "redirect not followed", status: 307, answer: httpTestContinue, wantErr: "status 307"},
		{name: "not JSON", answer: `control: continue`, wantErr: "invalid character"},
		{name: "empty", answer: ``, wantErr: "unexpected end"},
		{name: "trailing data", answer: `{"control":"continue"} {}`, wantErr: "invalid character"},
		{name: "array", answer: `[]`, wantErr: "cannot unmarshal array"},
		{name: "null", answer: `null`, wantErr: "no control"},
		{name: "no control", answer: `{"body":{}}`, wantErr: "no control"},
		{name: "unknown control", answer: `{"control":"stop"}`, wantErr: "neither"},
		{name: "control null", answer: `{"control":null}`, wantErr: "neither"},
		{name: "control number", answer: `{"control":403}`, wantErr: "neither"},
		{name: "control empty object", answer: `{"control":{}}`, wantErr: "neither"},
		{name: "control with another field", answer: `{"control":{"break":403,"why":"x"}}`, wantErr: "neither"},
		{name: "break 200", answer: `{"control":{"break":200}}`, wantErr: "not a status"},
		{name: "break 399", answer: `{"control":{"break":399}}`, wantErr: "not a status"},
		{name: "break 600", answer: `{"control":{"break":600}}`, wantErr: "not a status"},
		{name: "break string", answer: `{"control":{"break":"403"}}`, wantErr: "not a status"},
		{name: "break fraction", answer: `{"control":{"break":403.5}}`, wantErr: "not a status"},
		{name: "break exponent", answer: `{"control":{"break":4.03e2}}`, wantErr: "not a status"},
		{name: "body with break", answer: `{"control":{"break":403},"body":{"plan":"x"}}`, wantErr: "body with a break"},
		{name: "body not an object", answer: `{"control":"continue","body":"plan"}`, wantErr: "not an object"},
		{name: "body array", answer: `{"control":"continue","body":[1]}`, wantErr: "not an object"},
		{name: "negative cacheSeconds", answer: `{"control":"continue","cacheSeconds":-1}`, wantErr: "out of range"},
		{name: "huge cacheSeconds", answer: `{"control":"continue","cacheSeconds":1e300}`, wantErr: "out of range"},
		{name: "cacheSeconds string", answer: `{"control":"continue","cacheSeconds":"30"}`, wantErr: "cannot unmarshal string"},
		{name: "message number", answer: `{"control":{"break":403},"message":1}`, wantErr: "cannot unmarshal number"},
		{name: "headers not an object", answer: `{"control":"continue","responseHeaders":["x"]}`, wantErr: "cannot unmarshal array"},
		{name: "header value a string", answer: `{"control":"continue","responseHeaders":{"x-a":"v"}}`, wantErr: "not an array of strings"},
		{name: "header values null", answer: `{"control":"continue","responseHeaders":{"x-a":null}}`, wantErr: "not an array of strings"},
		{name: "header value number", answer: `{"control":"continue","responseHeaders":{"x-a":[1]}}`, wantErr: "not a string"},
		{name: "header value null", answer: `{"control":"continue","responseHeaders":{"x-a":["v",null]}}`, wantErr: "not a string"},
		{name: "header name with a space", answer: `{"control":"continue","responseHeaders":{"x a":["v"]}}`, wantErr: "name"},
		{name: "header name empty", answer: `{"control":"continue","responseHeaders":{"":["v"]}}`, wantErr: "name"},
		{name: "header value with a newline", answer: `{"control":"continue","responseHeaders":{"x-a":["v\r\nx-b: w"]}}`, wantErr: "value"},
		{name: "too large", answer: tooLarge, wantErr: "too large"},
		{name: "too large chunked", answer: tooLarge, chunked: true, wantErr: "too large"},
	} {
		t.Run(test.name, func(t *testing.T) {
			c := newHTTPTestHook(t, func(w http.ResponseWriter, r *http.Request) {
				if test.status == http.StatusTemporaryRedirect {
					w.Header().Set("Location", "/elsewhere")
				}
				if test.status != 0 {
					w.WriteHeader(test.status)
				}
				if !test.chunked {
					io.WriteString(w, test.answer)
					return
				}
				for a := test.answer; a != ""; {
					n := min(len(a), 32<<10)
					io.WriteString(w, a[:n])
					w.(http.Flusher).Flush()
					a = a[n:]
				}
			})
			got, err := c.Check(context.Background(), httpTestCall())
			if err == nil {
				t.Fatalf("got decision %+v and no error, want an error with %q", got, test.wantErr)
			}
			if !strings.Contains(err.Error(), test.wantErr) {
				t.Errorf("got error %q, want one with %q", err, test.wantErr)
			}
		})
	}
}

func TestHTTPClientRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := newHTTPTestClient(t, "http://"+addr+"/hook", HTTPOptions{})
	if got, err := c.Check(context.Background(), httpTestCall()); err == nil {
		t.Errorf("got decision %+v and no error, want an error", got)
	}
}

func TestHTTPClientDeadline(t *testing.T) {
	c := newHTTPTestHook(t, func(w http.ResponseWriter, r *http.Request) {
		// The server sees the client go only once the body is read.
		io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		io.WriteString(w, httpTestContinue)
	})
	for _, test := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{
			name: "deadline",
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 50*time.Millisecond)
			},
			want: context.DeadlineExceeded,
		},
		{
			name: "cancel",
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(50*time.Millisecond, cancel)
				return ctx, cancel
			},
			want: context.Canceled,
		},
	} {
		t.Run(test.name, func(t *testing.T) {
			ctx, cancel := test.ctx()
			defer cancel()
			start := time.Now()
			_, err := c.Check(ctx, httpTestCall())
			if elapsed := time.Since(start); elapsed > time.Second {
				t.Errorf("got Check returning after %v, want within 1s", elapsed)
			}
			if !errors.Is(err, test.want) {
				t.Errorf("got error %v, want %v", err, test.want)
			}
		})
	}
}

func TestHTTPClientUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "hook.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	type request struct{ path, host, proto string }
	got := make(chan request, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- request{r.URL.Path, r.Host, r.Proto}
		io.WriteString(w, `{"control":{"break":403}}`)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

	c := newHTTPTestClient(t, "unix://"+sock, HTTPOptions{})
	d, err := c.Check(context.Background(), httpTestCall())
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if d.Break != 403 {
		t.Errorf("got Break %d, want 403", d.Break)
	}
	if diff := cmp.Diff(request{"/", "localhost", "HTTP/1.1"}, <-got, cmp.AllowUnexported(request{})); diff != "" {
		t.Errorf("request mismatch (-want +got):\n%s", diff)
	}
}

func TestHTTPClientH2C(t *testing.T) {
	protoMajor := make(chan int, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protoMajor <- r.ProtoMajor
		io.WriteString(w, httpTestContinue)
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)

	c := newHTTPTestClient(t, "h2c://"+srv.Listener.Addr().String()+"/hook", HTTPOptions{})
	if _, err := c.Check(context.Background(), httpTestCall()); err != nil {
		t.Fatalf("Check: %v", err)
	}
	if got := <-protoMajor; got != 2 {
		t.Errorf("got ProtoMajor %d, want 2", got)
	}
}

func TestHTTPClientHTTPS(t *testing.T) {
	protoMajor := make(chan int, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protoMajor <- r.ProtoMajor
		io.WriteString(w, `{"control":{"break":451}}`)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	roots := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	tlsConfig := &tls.Config{RootCAs: roots}

	c := newHTTPTestClient(t, srv.URL+"/hook", HTTPOptions{TLSConfig: tlsConfig})
	d, err := c.Check(context.Background(), httpTestCall())
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if d.Break != 451 {
		t.Errorf("got Break %d, want 451", d.Break)
	}
	if got := <-protoMajor; got != 2 {
		t.Errorf("got ProtoMajor %d, want 2 (negotiated by ALPN)", got)
	}
	if tlsConfig.NextProtos != nil {
		t.Errorf("got the caller's NextProtos changed to %q, want nil", tlsConfig.NextProtos)
	}

	untrusting := newHTTPTestClient(t, srv.URL+"/hook", HTTPOptions{})
	if _, err := untrusting.Check(context.Background(), httpTestCall()); err == nil {
		t.Errorf("got no error from a hook whose certificate is not trusted, want one")
	}
}

func TestHTTPClientTraceparent(t *testing.T) {
	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    traceID,
		SpanID:     spanID,
		TraceFlags: trace.FlagsSampled,
	}))
	for _, test := range []struct {
		name string
		prop propagation.TextMapPropagator
		want string
	}{
		{name: "propagator", prop: propagation.TraceContext{}, want: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{name: "no propagator", want: ""},
	} {
		for _, scheme := range []string{"http", "h2c"} {
			t.Run(test.name+"/"+scheme, func(t *testing.T) {
				got := make(chan string, 1)
				srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					got <- r.Header.Get("Traceparent") + " " + r.Header.Get("Content-Type")
					io.WriteString(w, httpTestContinue)
				}))
				srv.Config.Protocols = new(http.Protocols)
				srv.Config.Protocols.SetHTTP1(true)
				srv.Config.Protocols.SetUnencryptedHTTP2(true)
				srv.Start()
				t.Cleanup(srv.Close)
				c := newHTTPTestClient(t, strings.Replace(srv.URL, "http", scheme, 1), HTTPOptions{Propagator: test.prop})
				// Twice: the first call's trace context is not the second's
				// header.
				for i, ctx := range []context.Context{ctx, context.Background()} {
					if _, err := c.Check(ctx, httpTestCall()); err != nil {
						t.Fatalf("Check %d: %v", i, err)
					}
					want := test.want + " application/json"
					if i > 0 {
						want = " application/json"
					}
					if tp := <-got; tp != want {
						t.Errorf("Check %d: got traceparent and Content-Type %q, want %q", i, tp, want)
					}
				}
			})
		}
	}
}

func TestHTTPClientIgnoresProxyEnvironment(t *testing.T) {
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	t.Setenv("http_proxy", "http://127.0.0.1:1")
	t.Setenv("NO_PROXY", "")
	c := newHTTPTestHook(t, answerJSON(httpTestContinue))
	if _, err := c.Check(context.Background(), httpTestCall()); err != nil {
		t.Errorf("Check with a proxy in the environment: %v", err)
	}
	// The environment's proxy is never asked (loopback is never proxied,
	// so the call above alone would pass with it too).
	if c.transport != nil && c.transport.Proxy != nil {
		t.Error("the transport has a Proxy function, want none")
	}
}

func TestNewHTTPClientBadURL(t *testing.T) {
	for _, rawURL := range []string{
		"",
		"localhost:8080",
		"ftp://host/path",
		"http:///path",
		"h2c:///path",
		"unix://host/path.sock",
		"unix:relative.sock",
		"http://host:port:bad/",
	} {
		t.Run(rawURL, func(t *testing.T) {
			if _, err := NewHTTPClient(rawURL, HTTPOptions{}); err == nil {
				t.Errorf("got no error for %q, want one", rawURL)
			}
		})
	}
}

// rawHook serves each connection with serve, on 127.0.0.1; it returns the
// URL of the hook and the count of connections accepted.
func rawHook(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) (string, *atomic.Int32) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int32
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			wg.Go(func() {
				defer c.Close()
				serve(c, bufio.NewReader(c))
			})
		}
	})
	return "http://" + l.Addr().String() + "/hook", &conns
}

// readRequest reads one request and its body.
func readRequest(br *bufio.Reader) error {
	r, err := http.ReadRequest(br)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, r.Body)
	return err
}

const rawContinue = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 22\r\n\r\n" + httpTestContinue

// TestHTTPClientRetriesClosedConnection: a kept-alive connection the hook
// closed before it answered is no failure: the check goes again on a new
// one.
func TestHTTPClientRetriesClosedConnection(t *testing.T) {
	// One answer per connection, then closed without saying so.
	url, conns := rawHook(t, func(c net.Conn, br *bufio.Reader) {
		if readRequest(br) == nil {
			io.WriteString(c, rawContinue)
		}
	})
	c := newHTTPTestClient(t, url, HTTPOptions{})
	for i := range 3 {
		if _, err := c.Check(context.Background(), httpTestCall()); err != nil {
			t.Fatalf("Check %d: %v", i, err)
		}
		// The hook's close reaches the client before the next check.
		time.Sleep(10 * time.Millisecond)
	}
	if got := conns.Load(); got != 3 {
		t.Errorf("got %d connections, want 3", got)
	}
}

// TestHTTPClientConnectionClose: an answer with Connection: close is used,
// and its connection is not.
func TestHTTPClientConnectionClose(t *testing.T) {
	url, conns := rawHook(t, func(c net.Conn, br *bufio.Reader) {
		for readRequest(br) == nil {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 22\r\n\r\n"+httpTestContinue)
		}
	})
	c := newHTTPTestClient(t, url, HTTPOptions{})
	for i := range 2 {
		if _, err := c.Check(context.Background(), httpTestCall()); err != nil {
			t.Fatalf("Check %d: %v", i, err)
		}
	}
	if got := conns.Load(); got != 2 {
		t.Errorf("got %d connections, want 2", got)
	}
}

// TestHTTPClientAnswerHeadersBounded: an answer whose headers run past
// 64 KiB is a failure, read no further.
func TestHTTPClientAnswerHeadersBounded(t *testing.T) {
	url, _ := rawHook(t, func(c net.Conn, br *bufio.Reader) {
		if readRequest(br) != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Long: "+strings.Repeat("a", 70<<10)+"\r\nContent-Length: 22\r\n\r\n"+httpTestContinue)
	})
	c := newHTTPTestClient(t, url, HTTPOptions{})
	if d, err := c.Check(context.Background(), httpTestCall()); err == nil {
		t.Errorf("got %+v and no error, want an error", d)
	}
}

// TestHTTPClientUnsolicitedAnswers: an interim answer (1xx) is skipped
// for the final one, and what a hook sends beyond its answer is never
// taken for the next call's.
func TestHTTPClientUnsolicitedAnswers(t *testing.T) {
	const rawBreak = "HTTP/1.1 200 OK\r\nContent-Length: 25\r\n\r\n" + `{"control":{"break":403}}`
	for _, test := range []struct{ name, answer string }{
		{"interim answer", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + rawBreak},
		{"too many interim answers", strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", 6) + rawBreak},
		{"a second answer", rawContinue + rawBreak},
	} {
		t.Run(test.name, func(t *testing.T) {
			url, _ := rawHook(t, func(c net.Conn, br *bufio.Reader) {
				for readRequest(br) == nil {
					io.WriteString(c, test.answer)
				}
			})
			c := newHTTPTestClient(t, url, HTTPOptions{})
			first, err := c.Check(context.Background(), httpTestCall())
			if test.name == "interim answer" && (err != nil || first.Break != 403) {
				t.Errorf("got %+v, %v; want the final answer's break 403", first, err)
			}
			// The second call gets an answer of its own, as the first did.
			second, err := c.Check(context.Background(), httpTestCall())
			if err == nil && !cmp.Equal(first, second) {
				t.Errorf("second call got %+v, the first %+v: an answer left on the connection", second, first)
			}
		})
	}
}

// TestHTTPClientAnswerFraming: answers framed otherwise than the common
// one (chunked, HTTP/1.0, odd spacing) are read as net/http reads them, and
// an answer cut short of its Content-Length is a failure, not a decision.
func TestHTTPClientAnswerFraming(t *testing.T) {
	for _, test := range []struct {
		name, answer string
		// closes: the hook closes the connection after its answer.
		closes    bool
		wantErr   bool
		wantConns int32
	}{
		{name: "chunked", answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n16\r\n" + httpTestContinue + "\r\n0\r\n\r\n", wantConns: 1},
		{name: "HTTP/1.0", answer: "HTTP/1.0 200 OK\r\nContent-Length: 22\r\n\r\n" + httpTestContinue, wantConns: 2},
		{name: "HTTP/1.0 keep-alive", answer: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 22\r\n\r\n" + httpTestContinue, wantConns: 1},
		{name: "spaces and case", answer: "HTTP/1.1 200 OK\r\ncontent-length: \t22 \r\nconnection: Keep-Alive, CLOSE\r\n\r\n" + httpTestContinue, wantConns: 2},
		{name: "cut short", answer: "HTTP/1.1 200 OK\r\nContent-Length: 30\r\n\r\n" + httpTestContinue, closes: true, wantErr: true, wantConns: 2},
	} {
		t.Run(test.name, func(t *testing.T) {
			url, conns := rawHook(t, func(c net.Conn, br *bufio.Reader) {
				for readRequest(br) == nil {
					io.WriteString(c, test.answer)
					if test.closes {
						return
					}
				}
			})
			c := newHTTPTestClient(t, url, HTTPOptions{})
			for i := range 2 {
				d, err := c.Check(context.Background(), httpTestCall())
				if test.wantErr {
					if err == nil {
						t.Errorf("Check %d: got %+v and no error, want an error", i, d)
					}
					continue
				}
				if err != nil || !cmp.Equal(d, Decision{}) {
					t.Errorf("Check %d: got %+v, %v; want continue", i, d, err)
				}
			}
			if got := conns.Load(); got != test.wantConns {
				t.Errorf("got %d connections, want %d", got, test.wantConns)
			}
		})
	}
}

// TestHTTPClientLargeRequest: a request larger than the socket takes at
// once is sent whole before its answer is read.
func TestHTTPClientLargeRequest(t *testing.T) {
	url, _ := rawHook(t, func(c net.Conn, br *bufio.Reader) {
		for readRequest(br) == nil {
			io.WriteString(c, rawContinue)
		}
	})
	c := newHTTPTestClient(t, url, HTTPOptions{})
	call := httpTestCall()
	call.Headers = map[string][]string{"x-large": {strings.Repeat("a", 16<<20)}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 2 {
		if d, err := c.Check(ctx, call); err != nil || !cmp.Equal(d, Decision{}) {
			t.Fatalf("Check %d: got %+v, %v; want continue", i, d, err)
		}
	}
}
