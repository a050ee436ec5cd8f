package testport

import (
	"net"
	"strconv"
	"testing"
)

// TestFree: a port below the ephemeral range that a server can listen on.
func TestFree(t *testing.T) {
	for range 20 {
		port := Free(t)
		if port < first || port > last {
			t.Fatalf("Free: %d, want within [%d, %d]", port, first, last)
		}
		lis, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("listen on the port Free gave: %v", err)
		}
		lis.Close()
	}
}
