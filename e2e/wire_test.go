package e2e

import (
	"testing"

	"google.golang.org/grpc"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// Compression on gRPC (docs/api.md). REST's, and CBOR, are the gateway's
// and tested in server/gateway.

// TestGRPCCompression creates and reads an account with each compressor.
func TestGRPCCompression(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	for _, name := range []string{"gzip", "zstd"} {
		t.Run(name, func(t *testing.T) {
			username := "grpc-" + name
			created, err := e.account.CreateAccount(t.Context(), &shebav1.CreateAccountRequest{Username: username, Password: "password1"}, grpc.UseCompressor(name))
			if err != nil {
				t.Fatalf("CreateAccount with %s: %v", name, err)
			}
			got, err := e.account.GetAccount(t.Context(), &shebav1.GetAccountRequest{AccountId: created.GetAccount().GetId()}, grpc.UseCompressor(name))
			if err != nil {
				t.Fatalf("GetAccount with %s: %v", name, err)
			}
			if got.GetAccount().GetUsername() != username {
				t.Errorf("GetAccount with %s: got %v, want %s", name, got.GetAccount(), username)
			}
		})
	}
}
