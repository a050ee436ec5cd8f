package connlimit

import (
	"net"
	"sync"
	"sync/atomic"
)

// Listener is a net.Listener that holds at most a bound of connections at
// once. It is safe for concurrent use.
type Listener struct {
	net.Listener
	max      int64
	open     atomic.Int64
	onRefuse func()
}

// NewListener returns l bounded to max connections at once; onRefuse,
// which must not be nil, is called for each connection closed because max
// were open.
func NewListener(l net.Listener, max int, onRefuse func()) *Listener {
	return &Listener{Listener: l, max: int64(max), onRefuse: onRefuse}
}

// Accept returns the next connection within the bound, closing those
// beyond it as they come.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			return &conn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		// Counted before the close, so that a client that sees its
		// connection closed finds it counted.
		l.onRefuse()
		_ = c.Close()
	}
}

// Open returns the number of connections held now.
func (l *Listener) Open() int { return int(l.open.Load()) }

// conn is an accepted connection, which frees its place once closed.
type conn struct {
	net.Conn
	l    *Listener
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}

// CloseWrite shuts down the writing side, as *net.TCPConn does: net/http
// calls it before closing an HTTP/1 connection so that the client reads
// the whole answer before the close.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
