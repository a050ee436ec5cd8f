package main

import (
	"context"
	"testing"

	"github.com/shebasvc/sheba/bench/peers/internal/peertest"
)

func TestPing(t *testing.T) {
	httpAddr, grpcAddr := peertest.Addr(t), peertest.Addr(t)
	peertest.Serve(t, func(ctx context.Context) error { return serve(ctx, httpAddr, grpcAddr) })
	// Both calls reach the gRPC server: the REST one through the gateway.
	peertest.Ping(t, "http://"+httpAddr, grpcAddr, "http://"+httpAddr+"/metrics",
		`grpc_server_handled_total{grpc_code="OK",grpc_method="Ping",grpc_service="sheba.v1.PingService",grpc_type="unary"} 2`)
}
