package certreload

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shebasvc/sheba/e2e/shebaproc"
	"github.com/shebasvc/sheba/internal/certreload/certtest"
)

// files are the names and contents of a Secret's keys.
type files map[string][]byte

// serverFiles are tls.crt and tls.key of a server certificate of serial n,
// and ca.crt when ca is not nil.
func serverFiles(t *testing.T, a *certtest.Authority, n int64, ca *certtest.Authority) files {
	t.Helper()
	c, k := a.Issue(t, n, false)
	f := files{"tls.crt": c, "tls.key": k}
	if ca != nil {
		f["ca.crt"] = ca.PEM
	}
	return f
}

// options serve the volume's files, with its ca.crt when it has one.
func options(v *certtest.Volume) Options {
	o := Options{CertFile: v.Path("tls.crt"), KeyFile: v.Path("tls.key")}
	if _, err := os.Stat(v.Path("ca.crt")); err == nil {
		o.ClientCAFile = v.Path("ca.crt")
	}
	return o
}

// start makes a Reloader of o, lets tweak change it, and runs it until the
// test ends; it returns once Run watches.
func start(t *testing.T, o Options, tweak func(*Reloader)) *Reloader {
	t.Helper()
	r, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if tweak != nil {
		tweak(r)
	}
	running := make(chan struct{})
	r.running = func() { close(running) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})
	select {
	case <-running:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not start")
	}
	return r
}

// serve runs an echo server on a TLS listener of cfg until the test ends
// and returns its address.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln = tls.NewListener(ln, cfg)
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// clientConfig trusts a for the server's certificate.
func clientConfig(a *certtest.Authority) *tls.Config {
	return &tls.Config{RootCAs: a.Pool(), ServerName: "localhost"}
}

// connect dials addr and makes one round trip on the connection (so that
// a client certificate refused after a TLS 1.3 handshake fails it too).
func connect(addr string, cfg *tls.Config) (*tls.Conn, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	if err := roundTrip(c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// roundTrip sends a line on c and reads it back from the echo server.
func roundTrip(c *tls.Conn) error {
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return err
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if string(got) != "ping\n" {
		return fmt.Errorf("echo %q", got)
	}
	return nil
}

// servedSerial is the serial of the certificate a new connection to addr
// is served.
func servedSerial(t *testing.T, addr string, cfg *tls.Config) int64 {
	t.Helper()
	c, err := connect(addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// eventually waits, 15 s at the most, for ok to hold.
func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 15s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logLines are the lines of logs that contain s.
func logLines(logs *shebaproc.Buffer, s string) []string {
	var out []string
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, s) {
			out = append(out, strings.TrimSuffix(line, "\n"))
		}
	}
	return out
}
