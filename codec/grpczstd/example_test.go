package grpczstd_test

import (
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // gzip registers itself

	"github.com/shebasvc/sheba/codec/grpczstd"
)

func ExampleRegister() {
	// In main, before any server or connection is made.
	grpczstd.Register()
	srv := grpc.NewServer() // now answers zstd and gzip requests in kind
	_ = srv
	// A client asks for zstd per call:
	_ = grpc.UseCompressor(grpczstd.Name)
}
