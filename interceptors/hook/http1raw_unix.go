//go:build unix

package hook

import (
	"io"
	"net"
	"os"
	"syscall"
)

// h1WriteReader writes a request and reads the first bytes of its answer,
// as c.Write then c.Read do, less one system call: c.Read tries a read at
// once, which finds nothing (the hook, another process, has not answered
// yet) and costs about 1.5 µs on this kind of machine, a tenth of a hook
// call, before it waits for the answer. Here the write is made from
// raw.Read's callback: raw.Read readies the wait first, so an answer that
// comes right after the write is not missed, and the read is made only
// once the connection is readable. A write that the socket does not take
// whole at once goes on through c.Write, and the read through c.Read.
type h1WriteReader struct {
	c   net.Conn
	raw syscall.RawConn
	// step is the callback, made once: a closure a call would allocate.
	step func(fd uintptr) bool

	// The state of the call under way.
	req, p          []byte
	wrote, readDone bool
	n, written      int
	werr, rerr      error
}

// newH1WriteReader returns the h1WriteReader of c; nil when c has no raw
// connection.
func newH1WriteReader(c net.Conn) *h1WriteReader {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	w := &h1WriteReader{c: c, raw: raw}
	w.step = w.stepFD
	return w
}

// stepFD writes on its first call, then reads: it returns true when done.
func (w *h1WriteReader) stepFD(fd uintptr) bool {
	if !w.wrote {
		w.wrote = true
		w.written, w.werr = syscall.Write(int(fd), w.req)
		if w.written < 0 {
			w.written = 0
		}
		// Whole: wait for the answer. Otherwise (EAGAIN, EINTR, a part,
		// a failure) c.Write goes on with it.
		return w.werr != nil || w.written < len(w.req)
	}
	for {
		w.n, w.rerr = syscall.Read(int(fd), w.p)
		if w.rerr != syscall.EINTR {
			break
		}
	}
	if w.rerr == syscall.EAGAIN {
		return false
	}
	w.readDone = true
	return true
}

// writeRead writes req and reads into p.
func (w *h1WriteReader) writeRead(req, p []byte) (int, error) {
	w.req, w.p = req, p
	w.wrote, w.readDone, w.n, w.written, w.werr, w.rerr = false, false, 0, 0, nil, nil
	defer func() { w.req, w.p = nil, nil }()
	if err := w.raw.Read(w.step); err != nil {
		// The wait failed: the connection's deadline passed, or it closed.
		return 0, err
	}
	if !w.readDone {
		if w.werr != nil && w.werr != syscall.EAGAIN && w.werr != syscall.EINTR {
			return 0, w.opError("write", w.werr)
		}
		if _, err := w.c.Write(req[w.written:]); err != nil {
			return 0, err
		}
		return w.c.Read(p)
	}
	switch {
	case w.rerr != nil:
		return 0, w.opError("read", w.rerr)
	case w.n <= 0 && len(p) > 0:
		return 0, io.EOF
	}
	return w.n, nil
}

// opError is err as c's Read or Write would return it.
func (w *h1WriteReader) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: w.c.LocalAddr().Network(), Source: w.c.LocalAddr(), Addr: w.c.RemoteAddr(), Err: os.NewSyscallError(op, err)}
}
