package main

import (
	"bytes"
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// tenthFails answers Ping OK, except every tenth call, which fails with
// ResourceExhausted; a call without the key or with another request than
// the one the test sends fails with Unauthenticated or InvalidArgument.
type tenthFails struct {
	shebav1.UnimplementedPingServiceServer
	key     string
	request []byte
	calls   atomic.Int64
}

func (s *tenthFails) Ping(ctx context.Context, req *shebav1.PingRequest) (*shebav1.PingResponse, error) {
	n := s.calls.Add(1)
	md, _ := metadata.FromIncomingContext(ctx)
	if got := md.Get("x-api-key"); len(got) != 1 || got[0] != s.key {
		return nil, status.Error(codes.Unauthenticated, "no key")
	}
	// The request's bytes arrive as the message's unknown fields.
	if !bytes.Equal(req.ProtoReflect().GetUnknown(), s.request) {
		return nil, status.Error(codes.InvalidArgument, "another request")
	}
	if n%10 == 0 {
		return nil, status.Error(codes.ResourceExhausted, "every tenth")
	}
	return &shebav1.PingResponse{Message: "pong"}, nil
}

func TestGrpcLoadCountsCodes(t *testing.T) {
	// Field 15, a string PingRequest does not declare.
	request := protowire.AppendString(protowire.AppendTag(nil, 15, protowire.BytesType), "pre-encoded")
	ping := &tenthFails{key: "k-123", request: request}
	srv := grpc.NewServer()
	shebav1.RegisterPingServiceServer(srv, ping)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	// Bounded by count; the duration is only a backstop.
	got, err := grpcLoadRun(t.Context(), grpcLoadConfig{
		addr:     lis.Addr().String(),
		method:   shebav1.PingService_Ping_FullMethodName,
		request:  request,
		metadata: map[string]string{"x-api-key": "k-123"},
		conns:    2,
		workers:  4,
		count:    200,
		duration: time.Minute,
		timeout:  10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.Requests != 200 || ping.calls.Load() != 200 {
		t.Errorf("reported %d calls, server answered %d; want 200 each", got.Requests, ping.calls.Load())
	}
	if diff := cmp.Diff(map[string]int64{"OK": 180, "ResourceExhausted": 20}, got.Statuses); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	wantMsgs := map[string]int64{"rpc error: code = ResourceExhausted desc = every tenth": 20}
	if diff := cmp.Diff(wantMsgs, got.ErrorMessages); diff != "" {
		t.Errorf("error messages (-want +got):\n%s", diff)
	}
	if got.LatencyOf != "ok" || got.P50ms <= 0 || got.P50ms > got.P90ms || got.P90ms > got.P99ms {
		t.Errorf("latency of %q: p50 %v, p90 %v, p99 %v ms; want ok, 0 < p50 <= p90 <= p99", got.LatencyOf, got.P50ms, got.P90ms, got.P99ms)
	}
	if got.Seconds <= 0 || got.OKPerSec <= 0 || got.OKPerSec >= got.RPS {
		t.Errorf("seconds %v, ok/s %v, req/s %v; want both rates above 0, ok/s below req/s", got.Seconds, got.OKPerSec, got.RPS)
	}

	// Without the key every call fails, and is counted as such.
	got, err = grpcLoadRun(t.Context(), grpcLoadConfig{
		addr: lis.Addr().String(), method: shebav1.PingService_Ping_FullMethodName, request: request,
		conns: 1, workers: 2, count: 10, duration: time.Minute, timeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int64{"Unauthenticated": 10}, got.Statuses); diff != "" {
		t.Errorf("without the key, statuses (-want +got):\n%s", diff)
	}
	if got.OKPerSec != 0 || got.P50ms != 0 {
		t.Errorf("without the key: ok/s %v, p50 %v ms; want 0, 0", got.OKPerSec, got.P50ms)
	}
}
