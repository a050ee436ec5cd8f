package main

import (
	"context"
	"testing"

	"github.com/shebasvc/sheba/bench/peers/internal/peertest"
)

func TestPing(t *testing.T) {
	httpAddr, grpcAddr := peertest.Addr(t), peertest.Addr(t)
	peertest.Serve(t, func(ctx context.Context) error { return serve(ctx, httpAddr, grpcAddr) })
	peertest.Ping(t, "http://"+httpAddr, grpcAddr, "http://"+httpAddr+"/metrics",
		`operation="/sheba.v1.PingService/Ping"`, `kind="http"`, `kind="grpc"`)
}
