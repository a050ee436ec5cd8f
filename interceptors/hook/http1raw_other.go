//go:build !unix

package hook

import "net"

// h1WriteReader is made for unix systems only: elsewhere a request is
// written by c.Write and its answer read by c.Read.
type h1WriteReader struct{}

func newH1WriteReader(net.Conn) *h1WriteReader { return nil }

func (*h1WriteReader) writeRead(req, p []byte) (int, error) {
	panic("hook: h1WriteReader on a system that has none")
}
