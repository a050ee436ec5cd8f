package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

// otlpsink is the no-op trace collector of the tracing row, run as
// `sheba-bench otlpsink ...`: it accepts OTLP exports over HTTP
// (POST /v1/traces) and gRPC (any method) and throws them away, answering
// an empty ExportTraceServiceResponse. The exporter in sheba does all its
// work (batching, encoding, sending); only the collector is missing.
func otlpsink(args []string) error {
	fs := flag.NewFlagSet("otlpsink", flag.ContinueOnError)
	httpAddr := fs.String("http", "127.0.0.1:0", "OTLP/HTTP listen address")
	grpcAddr := fs.String("grpc", "127.0.0.1:0", "OTLP/gRPC listen address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	glis, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		return err
	}
	// An empty message is also an empty ExportTraceServiceResponse: both
	// encode to zero bytes.
	gs := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		var in emptypb.Empty
		if err := stream.RecvMsg(&in); err != nil {
			return err
		}
		return stream.SendMsg(&emptypb.Empty{})
	}))
	go func() { _ = gs.Serve(glis) }()

	hs := &http.Server{
		Addr: *httpAddr,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/x-protobuf")
			w.WriteHeader(http.StatusOK)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		<-ctx.Done()
		gs.Stop()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	if err := hs.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("otlpsink: %w", err)
	}
	return nil
}
