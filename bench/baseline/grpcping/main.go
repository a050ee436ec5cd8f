// Command grpcping is the bare grpc-go baseline of `make bench`: a
// grpc.Server with no options and no interceptors that implements
// sheba.v1.PingService from the generated stubs, as sheba does, and nothing
// else.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

type pingServer struct {
	shebav1.UnimplementedPingServiceServer
}

func (pingServer) Ping(context.Context, *shebav1.PingRequest) (*shebav1.PingResponse, error) {
	return &shebav1.PingResponse{Message: "pong"}, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	flag.Parse()

	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpcping:", err)
		os.Exit(1)
	}
	srv := grpc.NewServer()
	shebav1.RegisterPingServiceServer(srv, pingServer{})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.Stop()
	}()
	if err := srv.Serve(lis); err != nil {
		fmt.Fprintln(os.Stderr, "grpcping:", err)
		os.Exit(1)
	}
}
