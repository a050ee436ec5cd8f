package main

import (
	"context"
	"testing"

	"github.com/shebasvc/sheba/bench/peers/internal/peertest"
)

func TestPing(t *testing.T) {
	httpAddr, grpcAddr, devAddr := peertest.Addr(t), peertest.Addr(t), peertest.Addr(t)
	peertest.Serve(t, func(ctx context.Context) error { return serve(ctx, httpAddr, grpcAddr, devAddr) })
	peertest.Ping(t, "http://"+httpAddr, grpcAddr, "http://"+devAddr+"/metrics",
		`http_server_requests_code_total{code="200",method="GET",path="/v1/ping"} 1`,
		`rpc_server_requests_code_total{code="0",method="/sheba.v1.PingService/Ping"} 1`)
}
