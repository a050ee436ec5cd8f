package interceptortest

import (
	"context"
	"net"
	"testing"

	"github.com/dunglas/httpsfv"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// PingFunc is the handler of the test server's Ping.
type PingFunc func(ctx context.Context) (*shebav1.PingResponse, error)

type pingServer struct {
	shebav1.UnimplementedPingServiceServer
	f PingFunc
}

func (s pingServer) Ping(ctx context.Context, _ *shebav1.PingRequest) (*shebav1.PingResponse, error) {
	return s.f(ctx)
}

// Serve starts a grpc.Server with interceptor whose PingService runs ping,
// and returns a client of it. Both are closed when the test ends.
func Serve(tb testing.TB, interceptor grpc.UnaryServerInterceptor, ping PingFunc) shebav1.PingServiceClient {
	tb.Helper()
	return ServeWith(tb, []grpc.ServerOption{grpc.UnaryInterceptor(interceptor)}, ping)
}

// ServeWith starts a grpc.Server with opts whose PingService runs ping, and
// returns a client of it. Both are closed when the test ends.
func ServeWith(tb testing.TB, opts []grpc.ServerOption, ping PingFunc) shebav1.PingServiceClient {
	tb.Helper()
	return shebav1.NewPingServiceClient(ServeServices(tb, opts, func(r grpc.ServiceRegistrar) {
		shebav1.RegisterPingServiceServer(r, pingServer{f: ping})
	}))
}

// ServeServices starts a grpc.Server with opts on 127.0.0.1, with the
// services register puts on it, and returns a plaintext connection to it.
// Both are closed when the test ends.
func ServeServices(tb testing.TB, opts []grpc.ServerOption, register func(grpc.ServiceRegistrar)) *grpc.ClientConn {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	srv := grpc.NewServer(opts...)
	register(srv)
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatalf("client: %v", err)
	}
	tb.Cleanup(func() {
		conn.Close()
		srv.Stop()
	})
	return conn
}

// Pong is a PingFunc that answers "pong".
func Pong(context.Context) (*shebav1.PingResponse, error) {
	return &shebav1.PingResponse{Message: "pong"}, nil
}

// RateLimitFields parses the RateLimit-Policy and RateLimit fields (the
// values of the header or metadata, in order) with a Structured Field
// Values parser, and fails tb unless each is one list item, both naming
// the same policy, with non-negative integer parameters q and w, and r and
// t. It returns the policy's name and the four numbers.
func RateLimitFields(tb testing.TB, policy, current []string) (name string, q, w, r, t int64) {
	tb.Helper()
	pl, err1 := httpsfv.UnmarshalList(policy)
	cl, err2 := httpsfv.UnmarshalList(current)
	if err1 != nil || err2 != nil || len(pl) != 1 || len(cl) != 1 {
		tb.Fatalf("RateLimit-Policy %q, RateLimit %q: want one list item each (%v, %v)", policy, current, err1, err2)
	}
	pi, ok1 := pl[0].(httpsfv.Item)
	ci, ok2 := cl[0].(httpsfv.Item)
	if !ok1 || !ok2 || pi.Value != ci.Value {
		tb.Fatalf("RateLimit-Policy %q, RateLimit %q: want items naming the same policy", policy, current)
	}
	param := func(p *httpsfv.Params, k string) int64 {
		v, _ := p.Get(k)
		n, ok := v.(int64)
		if !ok || n < 0 {
			tb.Fatalf("parameter %s = %v in %q %q, want a non-negative integer", k, v, policy, current)
		}
		return n
	}
	name, _ = pi.Value.(string)
	return name, param(pi.Params, "q"), param(pi.Params, "w"), param(ci.Params, "r"), param(ci.Params, "t")
}

// ReflectionStream opens a server-reflection stream on conn, as a dynamic
// client (grpcurl, a gRPC UI) does, and returns it once it has answered a
// first request: a stream that stays open until the client or the server
// ends it.
func ReflectionStream(tb testing.TB, conn grpc.ClientConnInterface) rpb.ServerReflection_ServerReflectionInfoClient {
	tb.Helper()
	refl, err := rpb.NewServerReflectionClient(conn).ServerReflectionInfo(tb.Context())
	if err != nil {
		tb.Fatalf("reflection stream: %v", err)
	}
	if err := refl.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}); err != nil {
		tb.Fatalf("reflection request: %v", err)
	}
	if _, err := refl.Recv(); err != nil {
		tb.Fatalf("reflection answer: %v", err)
	}
	return refl
}
