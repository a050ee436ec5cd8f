// Package testport picks ports for servers that tests start and stop
// (redis-server, Postgres).
package testport

import (
	"math/rand/v2"
	"net"
	"strconv"
	"testing"
)

// The ports Free chooses from: below Linux's ephemeral range (32768-60999
// by default), from which every listener on port 0 and every outgoing
// connection takes its port.
const (
	first = 20000
	last  = 32767
)

// Free returns a port on 127.0.0.1 that nothing listens on now, below the
// ephemeral range. A server stopped and restarted on it (an outage a test
// plays) finds it free again: a port of the ephemeral range could be
// handed meanwhile to a listener another test opens on port 0.
func Free(tb testing.TB) int {
	tb.Helper()
	for range 100 {
		port := first + rand.IntN(last-first+1)
		lis, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			lis.Close()
			return port
		}
	}
	tb.Fatalf("testport: no free port on 127.0.0.1 between %d and %d", first, last)
	return 0
}
