package resetguard

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

// Guard holds the rule of every connection of one server. It is safe for
// concurrent use.
type Guard struct {
	budget  int64
	onClose func(remote net.Addr)
}

// New returns a Guard whose connections may reset budget streams more than
// they complete calls; onClose (nil: none) is told of each connection the
// Guard ends, once.
func New(budget int, onClose func(remote net.Addr)) *Guard {
	if onClose == nil {
		onClose = func(net.Addr) {}
	}
	return &Guard{budget: int64(budget), onClose: onClose}
}

// account is the budget of one connection.
type account struct {
	left  atomic.Int64
	max   int64
	ended atomic.Bool
}

func (g *Guard) newAccount() *account {
	a := &account{max: g.budget}
	a.left.Store(g.budget)
	return a
}

// reset takes n resets from the budget, and reports whether they emptied
// it for the first time: the connection must end.
func (a *account) reset(n int) bool {
	return a.left.Add(-int64(n)) < 0 && a.ended.CompareAndSwap(false, true)
}

// complete gives back n completed calls, never beyond the budget's size.
func (a *account) complete(n int) {
	for {
		v := a.left.Load()
		w := min(v+int64(n), a.max)
		if v >= a.max || a.left.CompareAndSwap(v, w) {
			return
		}
	}
}

// ErrTooManyResets is what a read of a Conn ended by the guard returns.
var ErrTooManyResets = errors.New("connection closed: the client reset streams faster than it completed calls")

// Conn returns c, an HTTP/2 connection that a server reads and writes (the
// client's preface first), watched frame by frame: once its client has
// reset more streams than its budget allows, c is closed and its reads
// fail with ErrTooManyResets. The server must make its reads from one
// goroutine at a time, and its writes too, as grpc-go does.
func (g *Guard) Conn(c net.Conn) net.Conn {
	return &conn{Conn: c, g: g, a: g.newAccount(), in: frames{preface: len(http2.ClientPreface)}}
}

type conn struct {
	net.Conn
	g       *Guard
	a       *account
	in, out frames
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if resets, _ := c.in.scan(p[:n]); resets > 0 && c.a.reset(resets) {
		c.g.onClose(c.Conn.RemoteAddr())
		_ = c.Conn.Close()
		return 0, ErrTooManyResets
	}
	return n, err
}

func (c *conn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if _, done := c.out.scan(p[:n]); done > 0 {
		c.a.complete(done)
	}
	return n, err
}

// frames follows the frames of one direction of a connection through the
// bytes that pass, in pieces of any size.
type frames struct {
	preface int     // bytes of the client preface left to pass
	head    [9]byte // the frame header being read
	got     int     // bytes of head read
	skip    uint32  // payload bytes of the current frame left to pass
	rd      bytes.Reader
}

// scan follows p and returns how many RST_STREAM frames, and how many
// HEADERS frames that end their stream, begin in it.
func (f *frames) scan(p []byte) (resets, ends int) {
	for len(p) > 0 {
		switch {
		case f.preface > 0:
			k := min(f.preface, len(p))
			f.preface -= k
			p = p[k:]
		case f.skip > 0:
			k := min(f.skip, uint32(len(p)))
			f.skip -= k
			p = p[k:]
		default:
			k := copy(f.head[f.got:], p)
			f.got += k
			p = p[k:]
			if f.got < len(f.head) {
				return resets, ends
			}
			f.got = 0
			f.rd.Reset(f.head[:])
			h, err := http2.ReadFrameHeader(&f.rd)
			if err != nil {
				return resets, ends
			}
			f.skip = h.Length
			switch {
			case h.Type == http2.FrameRSTStream:
				resets++
			case h.Type == http2.FrameHeaders && h.Flags.Has(http2.FlagHeadersEndStream):
				ends++
			}
		}
	}
	return resets, ends
}

// connKey is the context key of a connection's account.
type connKey struct{}

// ConnContext is the http.Server's ConnContext: it gives each connection
// its budget, which Handler spends.
func (g *Guard) ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, &httpConn{a: g.newAccount(), conn: c})
}

type httpConn struct {
	a    *account
	conn net.Conn
}

// GoAwayGrace is how long a connection sent GOAWAY for its resets stays
// open: long enough for the GOAWAY to reach a client that reads, short for
// one that goes on opening streams, which net/http would go on reading
// (and decrypting, and decoding their headers) for a second after its
// streams are done.
const GoAwayGrace = 250 * time.Millisecond

// Handler counts the HTTP/2 requests h serves, on a server whose
// ConnContext is the Guard's: a request whose context was cancelled when h
// returned was reset, any other was completed. Once a connection has spent
// its budget, its answers carry "Connection: close", which makes net/http
// send GOAWAY, and the connection is closed GoAwayGrace later. Put it
// outermost, around the server's whole handler.
func (g *Guard) Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hc, _ := r.Context().Value(connKey{}).(*httpConn)
		if hc == nil || r.ProtoMajor != 2 {
			h.ServeHTTP(w, r)
			return
		}
		if hc.a.ended.Load() {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
		if r.Context().Err() == nil {
			hc.a.complete(1)
			return
		}
		if hc.a.reset(1) {
			g.onClose(hc.conn.RemoteAddr())
			time.AfterFunc(GoAwayGrace, func() { _ = hc.conn.Close() })
			// This stream's answer, unless h has sent its headers already;
			// else the next request's.
			w.Header().Set("Connection", "close")
		}
	})
}
