package connlimit_test

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shebasvc/sheba/internal/connlimit"
)

// closedAtOnce reports whether the server closes c within a second,
// rather than keeping it open.
func closedAtOnce(t *testing.T, c net.Conn) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	if err != io.EOF && !errors.Is(err, net.ErrClosed) {
		t.Logf("read: %v", err)
	}
	return true
}

// TestListener holds two connections of a listener bounded to two: a
// third is closed at once and counted, and one closed by the server frees
// its place.
func TestListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int64
	l := connlimit.NewListener(inner, 2, func() { refused.Add(1) })
	defer l.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	first, second := dial(), dial()
	held := []net.Conn{<-accepted, <-accepted}
	if closedAtOnce(t, first) || closedAtOnce(t, second) {
		t.Fatal("a connection within the bound was closed")
	}
	if !closedAtOnce(t, dial()) {
		t.Fatal("a third connection was kept open")
	}
	if got := refused.Load(); got != 1 {
		t.Errorf("refused: got %d, want 1", got)
	}
	if got := l.Open(); got != 2 {
		t.Errorf("open: got %d, want 2", got)
	}

	held[0].Close()
	held[0].Close() // a second Close frees nothing more
	third := dial()
	select {
	case c := <-accepted:
		defer c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("no connection accepted after one closed")
	}
	if closedAtOnce(t, third) {
		t.Error("the connection after one closed was closed")
	}
	if got := l.Open(); got != 2 {
		t.Errorf("open: got %d, want 2", got)
	}
}
