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
// they complete calls; onClose, which must not be nil, is told of each
// connection the Guard ends, once.
func New(budget int, onClose func(remote net.Addr)) *Guard {
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

// errTooManyResets is what a read of a Conn ended by the guard returns.
var errTooManyResets = errors.New("connection closed: the client reset streams faster than it completed calls")

// Conn returns c, an HTTP/2 connection that a server reads and writes (the
// client's preface first), watched frame by frame: once its client has
// reset more streams than its budget allows, c is closed and its reads
// fail with an error that says so. The server must make its reads from one
// goroutine at a time, and its writes too, as grpc-go does.
func (g *Guard) Conn(c net.Conn) net.Conn {
	return &conn{Conn: c, g: g, a: g.newAccount(), in: frames{preface: len(http2.ClientPreface)}}
}

type conn struct {
	net.Conn
	g       *Guard
	a       *account
	in, out frames
	// ended holds the streams the server ended last, and reset those the
	// client reset last, each at its slot: a stream both ended and reset
	// was reset, whichever came first, and is no completed call. grpc-go
	// answers a call it can refuse from its headers (a missing key, in the
	// tap) whether or not the client's reset of it has come, and counting
	// that answer as a completed call would let a client reset keyed
	// methods' streams without a key for ever.
	ended, reset streamRing
	// cut is set by the read that emptied the budget; only reads touch it.
	cut bool
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.scan(p[:n], c.clientFrame)
	if c.cut {
		c.cut = false
		c.g.onClose(c.Conn.RemoteAddr())
		_ = c.Conn.Close()
		return 0, errTooManyResets
	}
	return n, err
}

func (c *conn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.scan(p[:n], c.serverFrame)
	return n, err
}

// clientFrame counts a client RST_STREAM as a reset, twice when the
// server had ended the stream already (its completion taken back).
func (c *conn) clientFrame(h http2.FrameHeader) {
	if h.Type != http2.FrameRSTStream {
		return
	}
	n := 1
	if c.ended.take(h.StreamID) {
		n = 2
	} else {
		c.reset.put(h.StreamID)
	}
	if c.a.reset(n) {
		c.cut = true
	}
}

// serverFrame counts a HEADERS frame that ends its stream (the trailers
// of a call) as a completed call, unless the client has reset the stream.
func (c *conn) serverFrame(h http2.FrameHeader) {
	if h.Type != http2.FrameHeaders || !h.Flags.Has(http2.FlagHeadersEndStream) || c.reset.take(h.StreamID) {
		return
	}
	c.ended.put(h.StreamID)
	c.a.complete(1)
}

// ringSize is the streams a conn remembers as ended by each side: twice
// as many as a connection of grpc.addr may have open (256 by default), so
// that the second side to end a stream finds it there.
const ringSize = 512

// streamRing remembers the ids of the streams that one side ended last,
// each at its slot; used by the server's writes and by its reads, which
// run on two goroutines.
type streamRing [ringSize]atomic.Uint32

// slot is where id is kept: client streams have odd ids, one after the
// other.
func slot(id uint32) int { return int(id>>1) % ringSize }

func (r *streamRing) put(id uint32) { r[slot(id)].Store(id) }

// take reports whether id is there, and forgets it.
func (r *streamRing) take(id uint32) bool { return id != 0 && r[slot(id)].CompareAndSwap(id, 0) }

// frames follows the frames of one direction of a connection through the
// bytes that pass, in pieces of any size.
type frames struct {
	preface int     // bytes of the client preface left to pass
	head    [9]byte // the frame header being read
	got     int     // bytes of head read
	skip    uint32  // payload bytes of the current frame left to pass
	rd      bytes.Reader
}

// scan follows p and calls seen with the header of each frame that
// begins in it.
func (f *frames) scan(p []byte, seen func(http2.FrameHeader)) {
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
				return
			}
			f.got = 0
			f.rd.Reset(f.head[:])
			h, err := http2.ReadFrameHeader(&f.rd)
			if err != nil {
				return
			}
			f.skip = h.Length
			seen(h)
		}
	}
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

// goAwayGrace is how long a connection sent GOAWAY for its resets stays
// open: long enough for the GOAWAY to reach a client that reads, short for
// one that goes on opening streams, which net/http would go on reading
// (and decrypting, and decoding their headers) for a second after its
// streams are done.
const goAwayGrace = 250 * time.Millisecond

// Handler counts the HTTP/2 requests h serves, on a server whose
// ConnContext is the Guard's: a request whose context was cancelled when h
// returned was reset, any other was completed. Once a connection has spent
// its budget, its answers carry "Connection: close", which makes net/http
// send GOAWAY, and the connection is closed a quarter second later. Put it
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
			time.AfterFunc(goAwayGrace, func() { _ = hc.conn.Close() })
			// This stream's answer, unless h has sent its headers already;
			// else the next request's.
			w.Header().Set("Connection", "close")
		}
	})
}
