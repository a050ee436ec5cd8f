package certreload

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shebasvc/sheba/e2e/shebaproc"
)

// authority is a CA made for a test.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newAuthority(t *testing.T, name string) *authority {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &authority{cert: cert, key: key, pem: pemBlock("CERTIFICATE", der)}
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// notAfter is the expiry of the certificates of serial n: a day apart.
func notAfter(n int64) time.Time {
	return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(n) * 24 * time.Hour)
}

// issue signs a certificate of serial n, for localhost as a server or as a
// client, and returns it and its key in PEM.
func (a *authority) issue(t *testing.T, n int64, client bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(n),
		Subject:      pkix.Name{CommonName: fmt.Sprintf("serial %d", n)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     notAfter(n),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		tmpl.DNSNames, tmpl.IPAddresses = nil, nil
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", kder)
}

// clientCert is a client certificate of serial n signed by a.
func (a *authority) clientCert(t *testing.T, n int64) tls.Certificate {
	t.Helper()
	c, k := a.issue(t, n, true)
	cert, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// files are the names and contents of a Secret's keys.
type files map[string][]byte

// serverFiles are tls.crt and tls.key of a server certificate of serial n,
// and ca.crt when ca is not nil.
func serverFiles(t *testing.T, a *authority, n int64, ca *authority) files {
	t.Helper()
	c, k := a.issue(t, n, false)
	f := files{"tls.crt": c, "tls.key": k}
	if ca != nil {
		f["ca.crt"] = ca.pem
	}
	return f
}

// volume is a directory laid out as the kubelet lays out a Secret volume:
// the files in a timestamped directory, ..data a symlink to it, and each
// file a symlink through ..data.
type volume struct {
	dir string
	n   int
}

func newVolume(t *testing.T, f files) *volume {
	t.Helper()
	v := &volume{dir: t.TempDir()}
	v.update(t, f)
	return v
}

func (v *volume) path(name string) string { return filepath.Join(v.dir, name) }

// update writes f into a new timestamped directory, swaps ..data to it
// atomically (a ..data_tmp symlink renamed over ..data), adds the missing
// file symlinks and removes the old directory, as the kubelet does.
func (v *volume) update(t *testing.T, f files) {
	t.Helper()
	old, _ := os.Readlink(v.path("..data"))
	v.n++
	ts := fmt.Sprintf("..2026_12_02_10_00_%02d.%d", v.n, v.n)
	if err := os.Mkdir(v.path(ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range f {
		if err := os.WriteFile(filepath.Join(v.dir, ts, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(ts, v.path("..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(v.path("..data_tmp"), v.path("..data")); err != nil {
		t.Fatal(err)
	}
	for name := range f {
		if _, err := os.Lstat(v.path(name)); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), v.path(name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" {
		if err := os.RemoveAll(v.path(old)); err != nil {
			t.Fatal(err)
		}
	}
}

// options serve the volume's files, with its ca.crt when it has one.
func (v *volume) options() Options {
	o := Options{CertFile: v.path("tls.crt"), KeyFile: v.path("tls.key")}
	if _, err := os.Stat(v.path("ca.crt")); err == nil {
		o.ClientCAFile = v.path("ca.crt")
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
func clientConfig(a *authority) *tls.Config {
	roots := x509.NewCertPool()
	roots.AddCert(a.cert)
	return &tls.Config{RootCAs: roots, ServerName: "localhost"}
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
