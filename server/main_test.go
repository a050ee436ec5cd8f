package server_test

import (
	"os"
	"testing"

	_ "google.golang.org/grpc/encoding/gzip" // registers the gzip compressor, as cmd/sheba does

	"github.com/shebasvc/sheba/server/grpczstd"
)

func TestMain(m *testing.M) {
	// gRPC compressors are registered once per process, before any server.
	grpczstd.Register()
	os.Exit(m.Run())
}
