package hook

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
)

// h1Client asks a hook over HTTP/1.1 (http:// and unix:// URLs) on the
// caller's goroutine: it writes the request and reads the answer on a
// connection of its own pool, kept alive between calls.
//
// It is written by hand because http.Transport, which does the same, costs
// more than the rest of a hook call: it hands every request to a writing
// goroutine and every answer back from a reading goroutine per connection
// (two goroutine switches and their channels a call), and builds a
// Request, its header map and a Response per call. The head of the request
// is a few fixed lines, sent with its body in one write; the common
// answer's head is parsed in place (h1ParseHead), any other by net/http
// (http.ReadResponse). valyala/fasthttp's client also works on the
// caller's goroutine, but would bring a second HTTP stack (its own parser,
// header and body types, and limits to map onto §11's) for one fixed POST.
type h1Client struct {
	dial func(ctx context.Context) (net.Conn, error)
	// head is the request's start line and fixed headers, up to
	// Content-Length's value.
	head []byte

	mu   sync.Mutex
	idle []*h1Conn // most recently used last
}

// h1Conn is a kept-alive connection and its reader.
type h1Conn struct {
	c net.Conn
	// wr, when not nil, sends a request with the first read of its
	// answer; pending is that request, not yet sent.
	wr      *h1WriteReader
	pending []byte
	lr      budgetReader
	br      *bufio.Reader
	// idleSince is when it was put back to the pool.
	idleSince time.Time
	// expire ends the read or write under way: made once, so that a
	// call's context.AfterFunc costs no closure.
	expire func()
	// body and limit read the answer under way, kept here so that they
	// cost no allocation a call.
	body  h1Body
	limit io.LimitedReader
}

// Read reads from the connection; the first read of an answer sends its
// request.
func (pc *h1Conn) Read(p []byte) (int, error) {
	if pc.pending != nil {
		req := pc.pending
		pc.pending = nil
		return pc.wr.writeRead(req, p)
	}
	return pc.c.Read(p)
}

// budgetReader reads from a connection at most n more bytes, so that a
// hook cannot make sheba hold unbounded memory with a long header: past n,
// it fails.
type budgetReader struct {
	r io.Reader
	n int64
}

var errAnswerTooLarge = errors.New("hook answer headers too large")

func (b *budgetReader) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, errAnswerTooLarge
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	return n, err
}

// h1IdleTimeout is how long an idle connection is kept, as
// http.Transport's IdleConnTimeout.
const h1IdleTimeout = 90 * time.Second

// h1MaxInterim is the most interim (1xx) answers read before the final
// one, as http.Transport's.
const h1MaxInterim = 5

// h1LongAgo is a deadline in the past: set on a connection, it ends the
// read or write under way at once.
var h1LongAgo = time.Unix(1, 0)

func newH1Client(dial func(ctx context.Context) (net.Conn, error), host, target string) *h1Client {
	head := make([]byte, 0, 128)
	head = append(head, "POST "...)
	head = append(head, target...)
	head = append(head, " HTTP/1.1\r\nHost: "...)
	head = append(head, host...)
	head = append(head, "\r\nUser-Agent: Go-http-client/1.1\r\nContent-Type: application/json\r\nContent-Length: "...)
	return &h1Client{dial: dial, head: head}
}

// appendHead appends the head of a request whose body is n bytes long;
// extra holds more header lines, each ending in CRLF.
func (h *h1Client) appendHead(b []byte, n int, extra []byte) []byte {
	b = append(b, h.head...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, "\r\n"...)
	b = append(b, extra...)
	return append(b, "\r\n"...)
}

// get returns an idle connection, or a new one; reused says which.
func (h *h1Client) get(ctx context.Context) (pc *h1Conn, reused bool, err error) {
	now := time.Now()
	h.mu.Lock()
	for len(h.idle) > 0 {
		pc = h.idle[len(h.idle)-1]
		h.idle[len(h.idle)-1] = nil
		h.idle = h.idle[:len(h.idle)-1]
		if now.Sub(pc.idleSince) < h1IdleTimeout {
			h.mu.Unlock()
			return pc, true, nil
		}
		pc.c.Close()
	}
	h.mu.Unlock()
	c, err := h.dial(ctx)
	if err != nil {
		return nil, false, err
	}
	pc = &h1Conn{c: c, wr: newH1WriteReader(c)}
	pc.lr.r = pc
	pc.br = bufio.NewReaderSize(&pc.lr, 4096)
	pc.expire = func() { c.SetDeadline(h1LongAgo) }
	return pc, false, nil
}

// put keeps pc for the next call, or closes it when the pool is full.
func (h *h1Client) put(pc *h1Conn) {
	pc.idleSince = time.Now()
	h.mu.Lock()
	if len(h.idle) < httpMaxIdleConns {
		h.idle = append(h.idle, pc)
		pc = nil
	}
	h.mu.Unlock()
	if pc != nil {
		pc.c.Close()
	}
}

// closeIdle closes the idle connections.
func (h *h1Client) closeIdle() {
	h.mu.Lock()
	idle := h.idle
	h.idle = nil
	h.mu.Unlock()
	for _, pc := range idle {
		pc.c.Close()
	}
}

// roundTrip sends req (head and body) and reads the answer's body into
// out, bounded as http.go's constants say. It returns the answer's status;
// out holds its body only for a 200. A check is safe to send again: when a
// kept-alive connection turns out closed by the hook before it answered,
// the request goes again once on a new connection, as http.Transport does
// for a request so marked.
func (h *h1Client) roundTrip(ctx context.Context, req []byte, out io.ReaderFrom) (int, error) {
	for {
		pc, reused, err := h.get(ctx)
		if err != nil {
			return 0, ctxErr(ctx, err)
		}
		status, sent, err := h.exchange(ctx, pc, req, out)
		if err == nil {
			return status, nil
		}
		if reused && !sent && ctx.Err() == nil {
			continue
		}
		return 0, ctxErr(ctx, err)
	}
}

// ctxErr is err, or ctx's error when ctx ended, which caused err.
func ctxErr(ctx context.Context, err error) error {
	if d, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(d) {
		// The connection's deadline, ctx's, passed: ctx's timer, due, may
		// not have ended it yet. Its callers tell ctx's end from the
		// hook's failure by ctx.Err().
		<-ctx.Done()
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// exchange makes one request on pc, which it keeps or closes. sent reports
// whether the hook may have begun to answer: false when the connection
// failed before any byte of an answer came.
func (h *h1Client) exchange(ctx context.Context, pc *h1Conn, req []byte, out io.ReaderFrom) (status int, sent bool, err error) {
	deadline, _ := ctx.Deadline()
	if err := pc.c.SetDeadline(deadline); err != nil {
		pc.c.Close()
		return 0, false, err
	}
	// ctx's end (its deadline is set already) ends the wait at once.
	stop := context.AfterFunc(ctx, pc.expire)
	keep := false
	defer func() {
		// AfterFunc ran (or runs): the connection's deadline is spoilt.
		if !stop() || !keep {
			pc.c.Close()
			return
		}
		h.put(pc)
	}()
	if pc.wr != nil {
		// Sent by the first read, below.
		pc.pending = req
	} else if _, err := pc.c.Write(req); err != nil {
		return 0, false, err
	}
	pc.lr.n = httpMaxAnswerHeaderBytes
	_, err = pc.br.Peek(1)
	pc.pending = nil
	if err != nil {
		return 0, false, err
	}
	var (
		length int64
		body   io.Reader
	)
	buffered, _ := pc.br.Peek(pc.br.Buffered())
	if head, ok := h1ParseHead(buffered); ok {
		// The common answer, whole in the first read: parsed in place.
		pc.br.Discard(head.size)
		pc.body = h1Body{r: pc.br, n: head.contentLength}
		status, length, body = head.status, head.contentLength, &pc.body
		keep = !head.close
	} else {
		resp, err := http.ReadResponse(pc.br, nil)
		// Interim answers (1xx) come before the final one, which counts, as
		// http.Transport reads them: at most h1MaxInterim of them.
		for interim := 0; err == nil && interim < h1MaxInterim && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols; interim++ {
			resp, err = http.ReadResponse(pc.br, nil)
		}
		if err != nil {
			return 0, true, err
		}
		status, length, body = resp.StatusCode, resp.ContentLength, resp.Body
		// After too many interim answers the final one is still to come: the
		// connection is not kept, or its next call would read it.
		keep = !resp.Close && resp.StatusCode >= 200
	}
	// The body's own bounds follow; the budget only guards the head.
	pc.lr.n = 1<<63 - 1
	if status != http.StatusOK {
		// Read a little of it so the connection is kept.
		pc.limit = io.LimitedReader{R: body, N: httpMaxDrainBytes + 1}
		n, err := io.Copy(io.Discard, &pc.limit)
		keep = keep && err == nil && n <= httpMaxDrainBytes
		return status, true, nil
	}
	if length > httpMaxAnswerBytes {
		keep = false
		return 0, true, fmt.Errorf("hook answer too large: %d bytes, over %d", length, httpMaxAnswerBytes)
	}
	pc.limit = io.LimitedReader{R: body, N: httpMaxAnswerBytes + 1}
	if _, err := out.ReadFrom(&pc.limit); err != nil {
		keep = false
		return 0, true, fmt.Errorf("read hook answer: %w", err)
	}
	// Over the bound, the answer is not read to its end; bytes past its
	// end are no answer to the next call.
	keep = keep && pc.limit.N > 0 && pc.br.Buffered() == 0
	return status, true, nil
}

// h1Body reads an answer's body of a known length, n bytes more, from r,
// as net/http's body does: a connection that ends before is an
// io.ErrUnexpectedEOF.
type h1Body struct {
	r io.Reader
	n int64
}

func (b *h1Body) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	if err == io.EOF && b.n > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// headerLines is a propagation.TextMapCarrier that writes header lines:
// the trace context of a call, on the HTTP/1.1 path that has no header map.
type headerLines struct{ b []byte }

func (h *headerLines) Get(string) string { return "" }
func (h *headerLines) Keys() []string    { return nil }

// Set appends "key: value\r\n"; a name or value that cannot be sent is
// left out, as http.Transport would refuse the request.
func (h *headerLines) Set(key, value string) {
	if !httpguts.ValidHeaderFieldName(key) || !httpguts.ValidHeaderFieldValue(value) {
		return
	}
	h.b = append(h.b, key...)
	h.b = append(h.b, ": "...)
	h.b = append(h.b, value...)
	h.b = append(h.b, "\r\n"...)
}
