package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/http"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/e2e/resttest"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/server"
)

// Nothing is decoded before the key, and no message is larger than it
// needs to be (docs/api.md#authentication, #message-size): on gRPC the key
// is checked from the headers before the message is read, a message over
// grpc.max_recv_bytes is refused on every protocol that carries one, and a
// repeated field over what a valid request holds is refused before the
// rest of the message is handled.

// rawCodec sends a message's bytes as they are, from a *[]byte: the client
// then allocates nothing per call for what it sends, and the memory a test
// measures is the server's.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

// emptyEventTypes is a CreateWebhookEndpoint message of url and n empty
// event types: two bytes each.
func emptyEventTypes(url string, n int) []byte {
	b := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte(url))
	for range n {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, 0)
	}
	return b
}

// allocated returns the bytes the process has allocated on the heap so
// far: the server runs in it (the client's share is kept small).
func allocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// rawClients are n connections to addr that send raw messages (rawCodec)
// of up to 4 MiB.
func rawClients(t *testing.T, addr string, n int) []*grpc.ClientConn {
	t.Helper()
	conns := make([]*grpc.ClientConn, n)
	for i := range conns {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(4<<20), grpc.ForceCodecV2(rawCodec{})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns[i] = c
	}
	return conns
}

const createWebhook = shebav1.WebhookService_CreateWebhookEndpoint_FullMethodName

// TestGRPCKeyBeforeMessage is the audit's shape: 128 calls of
// CreateWebhookEndpoint without a valid key, each a megabyte of 500,000
// empty event types, 64 at a time over 4 connections. Every one is
// UNAUTHENTICATED with its ErrorInfo, counted as the chain counts a
// refusal, and logged at most once a second; and the server reads none of
// them: it used to decode each message before the chain refused it, about
// 44 MiB allocated a call (the process grew by 900 MB), and now allocates
// less than 1 MiB a call, however large the message. Not parallel: it
// measures the process's allocations.
func TestGRPCKeyBeforeMessage(t *testing.T) {
	const (
		items    = 500_000
		conns    = 4
		inFlight = 64
		calls    = 128
		// What a call may cost the server at most: well above what a
		// refusal from the headers costs (tens of KiB), far below the
		// decoding of the message (44 MiB).
		maxPerCall = 1 << 20
	)
	e := newTestEnv(t)
	waitReady(t, e)
	begin := time.Now()
	msg := emptyEventTypes("https://example.com/hook", items)
	clients := rawClients(t, e.grpcAddr, conns)
	call := func(ctx context.Context, i int, key string) error {
		if key != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
		}
		var out []byte
		return clients[i%conns].Invoke(ctx, createWebhook, &msg, &out)
	}
	// A first call of each kind warms what any call warms.
	for _, key := range []string{"", "wrong-key-0123456789abcdefghijkl"} {
		if err := call(t.Context(), 0, key); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("warm-up call: %v", err)
		}
	}

	for _, run := range []struct {
		name, key, reason string
	}{
		{"no key", "", reason.APIKeyMissing},
		{"wrong key", "wrong-key-0123456789abcdefghijkl", reason.APIKeyInvalid},
	} {
		t.Run(run.name, func(t *testing.T) {
			before := refusalCounts(e.scrape(t))
			logsBefore := strings.Count(e.logs.String(), tapLogLine)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			errs := make([]error, calls)
			slots := make(chan struct{}, inFlight)
			var wg sync.WaitGroup
			start, allocBefore := time.Now(), allocated()
			for i := range calls {
				slots <- struct{}{}
				wg.Go(func() {
					defer func() { <-slots }()
					errs[i] = call(ctx, i, run.key)
				})
			}
			wg.Wait()
			took, perCall := time.Since(start), (allocated()-allocBefore)/calls
			t.Logf("%d calls of %d bytes, %s, %d at a time over %d connections: %v, %.1f KiB allocated a call",
				calls, len(msg), run.name, inFlight, conns, took.Round(time.Millisecond), float64(perCall)/1024)

			wrong := 0
			for i, err := range errs {
				st := status.Convert(err)
				if st.Code() == codes.Unauthenticated && cmp.Equal(resttest.ErrorInfos(st), []string{reason.Domain + "/" + run.reason}) {
					continue
				}
				if wrong++; wrong <= 3 {
					t.Errorf("call %d: got %v with %v, want Unauthenticated with the one ErrorInfo %s", i, err, resttest.ErrorInfos(st), run.reason)
				}
			}
			if perCall > maxPerCall {
				t.Errorf("the server allocated %.1f MiB a call, want under %d MiB: the message was read", float64(perCall)/(1<<20), maxPerCall>>20)
			}
			after := refusalCounts(e.scrape(t))
			for k, b := range before {
				if got := after[k] - b; got != calls {
					t.Errorf("%s grew by %v, want %d", k, got, calls)
				}
			}
			// At most a line a second (and a second may have begun
			// just before the calls).
			if lines, most := strings.Count(e.logs.String(), tapLogLine)-logsBefore, int(took/time.Second)+1; lines > most {
				t.Errorf("%d log lines of refusals over %v, want at most %d (one a second)", lines, took.Round(time.Millisecond), most)
			}
		})
	}
	// The log line goes out on a goroutine of its own: the first refusal's
	// is there, and no more than one a second.
	var lines int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if lines = strings.Count(e.logs.String(), tapLogLine); lines > 0 {
			break
		}
	}
	if took, most := time.Since(begin), int(time.Since(begin)/time.Second)+1; lines < 1 || lines > most {
		t.Errorf("%d log lines of refusals over %v, want 1 to %d (the first, then at most one a second)", lines, took.Round(time.Millisecond), most)
	}
	if n := strings.Count(e.logs.String(), `"method":"`+createWebhook+`"`); n > lines {
		t.Errorf("%d log lines name %s, want only the %d of the refusals: the chain logged a call", n, createWebhook, lines)
	}
}

// tapLogLine starts the log line of calls refused before their message.
const tapLogLine = `"msg":"request refused before its message`

// refusalCounts are the series a refusal of CreateWebhookEndpoint without
// a valid key moves, by name.
func refusalCounts(f map[string]*dto.MetricFamily) map[string]float64 {
	return map[string]float64{
		"sheba_rejected_total{reason=unauthenticated}":                     series(f, "sheba_rejected_total", "reason")["reason=unauthenticated"],
		"grpc_server_started_total{CreateWebhookEndpoint}":                 series(f, "grpc_server_started_total", "grpc_method")["grpc_method=CreateWebhookEndpoint"],
		"grpc_server_handled_total{CreateWebhookEndpoint,Unauthenticated}": series(f, "grpc_server_handled_total", "grpc_method", "grpc_code")["grpc_method=CreateWebhookEndpoint,grpc_code=Unauthenticated"],
		"sheba_requests_total{CreateWebhookEndpoint,Unauthenticated,none}": series(f, "sheba_requests_total", "method", "code", "api_key_id")["method="+createWebhook+",code=Unauthenticated,api_key_id=none"],
	}
}

// padded returns m with an unknown field that makes it exactly size bytes
// on the wire: the services ignore it.
func padded[M proto.Message](t *testing.T, m M, size int) M {
	t.Helper()
	m = proto.Clone(m).(M)
	base := proto.Size(m)
	for n := size - base; n >= 0; n-- {
		u := protowire.AppendBytes(protowire.AppendTag(nil, 1000, protowire.BytesType), make([]byte, n))
		if len(u) == size-base {
			m.ProtoReflect().SetUnknown(u)
			if proto.Size(m) != size {
				t.Fatalf("padded to %d bytes, want %d", proto.Size(m), size)
			}
			return m
		}
	}
	t.Fatalf("cannot pad a message of %d bytes to %d", base, size)
	return m
}

// connectPost posts body with testKey to method as a Connect or gRPC-Web
// call of contentType. The body is sent as it is, not copied: the tests
// that measure the process's allocations call it.
func connectPost(t *testing.T, e *testEnv, method, contentType string, body []byte) restResponse {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.baseURL+method, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("X-Api-Key", testKey)
	return resttest.Client{}.Send(t, req)
}

// connectJSON posts a Connect JSON call of method with body, and returns
// its HTTP status and its status (nil on success).
func connectJSON(t *testing.T, e *testEnv, method string, body []byte) (int, *status.Status) {
	t.Helper()
	r := connectPost(t, e, method, "application/json", body)
	if r.Code == http.StatusOK {
		return r.Code, nil
	}
	return r.Code, resttest.ConnectStatus(t, r.Body)
}

// TestGRPCMaxRecvBytes: a message of grpc.max_recv_bytes passes on gRPC,
// Connect (JSON and proto) and gRPC-Web; one byte more is
// RESOURCE_EXHAUSTED with the one ErrorInfo BODY_TOO_LARGE, also when it
// came compressed to a few bytes.
func TestGRPCMaxRecvBytes(t *testing.T) {
	t.Parallel()
	const limit = 16 << 10
	e := newTestEnv(t, func(c *config.Config) { c.GRPC.MaxRecvBytes = limit })
	get := &shebav1.GetAccountRequest{AccountId: unknownID}
	wantTooLarge := func(t *testing.T, st *status.Status) {
		t.Helper()
		wantStatus(t, st, codes.ResourceExhausted, reason.BodyTooLarge, "")
	}
	const getAccount = shebav1.AccountService_GetAccount_FullMethodName

	t.Run("gRPC", func(t *testing.T) {
		client := e.account
		_, err := client.GetAccount(t.Context(), padded(t, get, limit))
		wantGRPCError(t, err, codes.NotFound, "")
		for _, opts := range [][]grpc.CallOption{nil, {grpc.UseCompressor(gzip.Name)}} {
			_, err = client.GetAccount(t.Context(), padded(t, get, limit+1), opts...)
			wantTooLarge(t, status.Convert(err))
		}
		// Beyond what grpc-go reads of a message (http.max_body_bytes
		// here), grpc-go refuses it by itself, before sheba sees the call.
		_, err = client.GetAccount(t.Context(), padded(t, get, 1<<20+1))
		if status.Code(err) != codes.ResourceExhausted {
			t.Errorf("over what grpc-go reads: got %v, want ResourceExhausted", err)
		}
	})
	for _, p := range []string{"connect-proto", "grpc-web", "grpc-web-text"} {
		t.Run(p, func(t *testing.T) {
			a := browserCall[shebav1.GetAccountRequest, shebav1.GetAccountResponse](t, e, p, getAccount, padded(t, get, limit), testKey)
			wantBrowserError(t, a, codes.NotFound, reason.NotFound, "")
			a = browserCall[shebav1.GetAccountRequest, shebav1.GetAccountResponse](t, e, p, getAccount, padded(t, get, limit+1), testKey)
			wantTooLarge(t, a.st)
		})
	}
	t.Run("connect-json", func(t *testing.T) {
		// JSON's own size: the spaces pad it.
		body := func(size int) []byte {
			b := []byte(`{"accountId":"` + unknownID + `"`)
			return append(append(b, bytes.Repeat([]byte(" "), size-len(b)-1)...), '}')
		}
		if code, st := connectJSON(t, e, getAccount, body(limit)); st.Code() != codes.NotFound {
			t.Errorf("at the limit: HTTP %d, %v; want NotFound", code, st)
		}
		_, st := connectJSON(t, e, getAccount, body(limit+1))
		wantTooLarge(t, st)
	})
}

// TestRepeatedFieldsBounded: a request with one more event type than
// there are event types is refused INVALID_ARGUMENT with the violation of
// event_types, before any other rule, on every transport.
func TestRepeatedFieldsBounded(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, allowPrivate)
	types := append(server.EventTypes(), server.EventTypes()[0])
	over := &shebav1.CreateWebhookEndpointRequest{Url: "http://127.0.0.1:1/hook", EventTypes: types}
	t.Run("gRPC", func(t *testing.T) {
		_, err := shebav1.NewWebhookServiceClient(e.conn).CreateWebhookEndpoint(t.Context(), over)
		wantEventTypesOver(t, status.Convert(err))
	})
	t.Run("REST JSON", func(t *testing.T) {
		body, err := protojson.Marshal(over)
		if err != nil {
			t.Fatal(err)
		}
		r := e.do(t, http.MethodPost, "/v1/webhookEndpoints", string(body))
		wantEventTypesOver(t, status.FromProto(wantRESTError(t, r, http.StatusBadRequest, codes.InvalidArgument, "")))
	})
	t.Run("REST CBOR", func(t *testing.T) {
		body, err := cbor.Marshal(map[string]any{"url": over.GetUrl(), "eventTypes": types})
		if err != nil {
			t.Fatal(err)
		}
		r := e.do(t, http.MethodPost, "/v1/webhookEndpoints", string(body), "Content-Type", "application/cbor", "Accept", "application/json")
		wantEventTypesOver(t, status.FromProto(wantRESTError(t, r, http.StatusBadRequest, codes.InvalidArgument, "")))
	})
	for _, p := range browserProtocols {
		t.Run(p, func(t *testing.T) {
			a := browserCall[shebav1.CreateWebhookEndpointRequest, shebav1.CreateWebhookEndpointResponse](t, e, p, createWebhook, over, testKey)
			wantEventTypesOver(t, a.st)
		})
	}
	// Within the bound, the request is handled as before.
	if _, err := shebav1.NewWebhookServiceClient(e.conn).CreateWebhookEndpoint(t.Context(),
		&shebav1.CreateWebhookEndpointRequest{Url: "http://127.0.0.1:1/hook", EventTypes: server.EventTypes()}); err != nil {
		t.Fatalf("every event type once: %v", err)
	}
}

// wantEventTypesOver checks the answer to a request with too many event
// types: INVALID_ARGUMENT, the one ErrorInfo INVALID_ARGUMENT, and the
// violation of event_types.
func wantEventTypesOver(t *testing.T, st *status.Status) {
	t.Helper()
	wantStatus(t, st, codes.InvalidArgument, reason.InvalidArgument, "event_types")
}

// TestHugeRepeatedFieldUnread: a megabyte of empty event types, over gRPC
// and the browser protocols' protobuf (Connect and gRPC-Web), is refused
// as too many event types and costs the server a fraction of what
// unmarshalling the message takes (about 44 MiB): it is not unmarshalled.
// Not parallel: it measures the process's allocations.
func TestHugeRepeatedFieldUnread(t *testing.T) {
	e := newTestEnv(t, allowPrivate, func(c *config.Config) { c.GRPC.MaxRecvBytes = 1 << 20 })
	waitReady(t, e)
	huge := emptyEventTypes("http://127.0.0.1:1/hook", 500_000)
	start := allocated()
	if err := proto.Unmarshal(huge, &shebav1.CreateWebhookEndpointRequest{}); err != nil {
		t.Fatal(err)
	}
	unmarshal := allocated() - start
	client := rawClients(t, e.grpcAddr, 1)[0]
	post := func(t *testing.T, contentType string, body []byte) *status.Status {
		t.Helper()
		r := connectPost(t, e, createWebhook, contentType, body)
		if contentType == "application/proto" {
			return resttest.ConnectStatus(t, r.Body)
		}
		trailers, _ := grpcWebFrames(t, r.Header, r.Body)
		return resttest.GRPCWebStatus(t, trailers)
	}
	for _, c := range []struct {
		name string
		call func(t *testing.T) *status.Status
	}{
		{"gRPC", func(t *testing.T) *status.Status {
			var out []byte
			ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", testKey)
			return status.Convert(client.Invoke(ctx, createWebhook, &huge, &out))
		}},
		{"connect-proto", func(t *testing.T) *status.Status { return post(t, "application/proto", huge) }},
		{"grpc-web", func(t *testing.T) *status.Status {
			return post(t, "application/grpc-web", append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(huge))), huge...))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			const calls = 8
			wantEventTypesOver(t, c.call(t)) // warms what any call warms
			start := allocated()
			for range calls {
				wantEventTypesOver(t, c.call(t))
			}
			perCall := (allocated() - start) / calls
			t.Logf("%s: %.1f MiB allocated a call; unmarshalling the message alone takes %.1f MiB", c.name, mib(perCall), mib(unmarshal))
			if perCall > unmarshal/4 {
				t.Errorf("%s: %.1f MiB allocated a call, want under a quarter of the %.1f MiB that unmarshalling takes: the message was unmarshalled",
					c.name, mib(perCall), mib(unmarshal))
			}
		})
	}
}
