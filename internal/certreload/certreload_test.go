package certreload

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shebasvc/sheba/e2e/shebaproc"
	"github.com/shebasvc/sheba/internal/certreload/certtest"
)

func TestNew(t *testing.T) {
	ca := certtest.NewAuthority(t, "server CA")
	clients := certtest.NewAuthority(t, "client CA")
	cert, key := ca.Issue(t, 7, false)
	_, otherKey := ca.Issue(t, 8, false)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	certFile, keyFile, caFile := write("tls.crt", cert), write("tls.key", key), write("ca.crt", clients.PEM)
	garbage := write("garbage", []byte("-----BEGIN CERT"))
	badDER := write("bad.der", certtest.EncodePEM("CERTIFICATE", []byte("not DER")))
	badKey := write("bad.key", certtest.EncodePEM("PRIVATE KEY", []byte("not DER")))
	other := write("other.key", otherKey)
	missing := filepath.Join(dir, "missing")

	t.Run("good", func(t *testing.T) {
		r, err := New(Options{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile})
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Certificate().SerialNumber.Int64(); got != 7 {
			t.Errorf("serial %d, want 7", got)
		}
		if r.o.Poll != 10*time.Second {
			t.Errorf("Poll %v, want the default 10s", r.o.Poll)
		}
	})

	for _, tc := range []struct {
		name          string
		cert, key, ca string
		wantKey       string
		wantMsg       string // the part of the message that names the problem
	}{
		{"cert missing", missing, keyFile, "", "tls.cert_file", "no such file"},
		{"key missing", certFile, missing, "", "tls.key_file", "no such file"},
		{"cert not PEM", garbage, keyFile, "", "tls.cert_file", "no PEM certificate in " + garbage},
		{"cert block not DER", badDER, keyFile, "", "tls.cert_file", badDER + ": certificate 1: "},
		{"key not PEM", certFile, garbage, "", "tls.key_file", "no PEM private key in " + garbage},
		{"key block not DER", certFile, badKey, "", "tls.key_file", "does not parse"},
		{"key of another certificate", certFile, other, "", "tls.key_file", other + " does not match tls.cert_file " + certFile},
		{"cert as key", certFile, certFile, "", "tls.key_file", "no PEM private key"},
		{"CA not PEM", certFile, keyFile, garbage, "tls.client_ca_file", "no PEM certificate in " + garbage},
		{"CA missing", certFile, keyFile, missing, "tls.client_ca_file", "no such file"},
		{"CA without cert", "", "", caFile, "tls.client_ca_file", "needs tls.cert_file"},
		{"CA without cert but with key", "", keyFile, caFile, "tls.client_ca_file", "needs tls.cert_file"},
		{"no cert", "", keyFile, "", "tls.cert_file", "not set"},
		{"cert without key", certFile, "", "", "tls.key_file", "not set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(Options{CertFile: tc.cert, KeyFile: tc.key, ClientCAFile: tc.ca})
			if r != nil {
				t.Error("a Reloader with the error")
			}
			var ke *KeyError
			if !errors.As(err, &ke) {
				t.Fatalf("error %v (%T), want a *KeyError", err, err)
			}
			if diff := cmp.Diff(tc.wantKey, ke.Key); diff != "" {
				t.Errorf("Key (-want +got):\n%s", diff)
			}
			if !strings.Contains(ke.Msg, tc.wantMsg) {
				t.Errorf("Msg %q, want it to contain %q", ke.Msg, tc.wantMsg)
			}
			if want := ke.Key + ": " + ke.Msg; err.Error() != want {
				t.Errorf("Error() %q, want %q", err.Error(), want)
			}
		})
	}
}

func TestNewRegistersTheMetricsOnce(t *testing.T) {
	ca := certtest.NewAuthority(t, "server CA")
	v := certtest.NewVolume(t, serverFiles(t, ca, 1, nil))
	o := options(v)
	o.Registerer = prometheus.NewRegistry()
	if _, err := New(o); err != nil {
		t.Fatal(err)
	}
	_, err := New(o)
	var ke *KeyError
	if err == nil || errors.As(err, &ke) {
		t.Errorf("a second Reloader on the registry: error %v, want the registry's", err)
	}
}

// TestRotation rotates a Secret volume, with the poll out of the way, so
// that fsnotify alone notices each swap.
func TestRotation(t *testing.T) {
	ca := certtest.NewAuthority(t, "server CA")
	v := certtest.NewVolume(t, serverFiles(t, ca, 1, nil))
	reg := prometheus.NewRegistry()
	logs := &shebaproc.Buffer{}
	o := options(v)
	o.Poll = time.Hour
	o.Registerer = reg
	o.Log = slog.New(slog.NewTextHandler(logs, nil))
	r := start(t, o, nil)
	addr := serve(t, r.ServerConfig())
	client := clientConfig(ca)

	expiry := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "sheba_tls_certificate_expiry_timestamp_seconds" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no sheba_tls_certificate_expiry_timestamp_seconds")
		return 0
	}
	served := func(n int64) func() bool {
		return func() bool { return servedSerial(t, addr, client) == n }
	}

	if got := servedSerial(t, addr, client); got != 1 {
		t.Fatalf("served serial %d, want 1", got)
	}
	if got, want := expiry(), float64(certtest.NotAfter(1).Unix()); got != want {
		t.Errorf("expiry %v, want %v", got, want)
	}
	before, err := connect(addr, client)
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()

	v.Update(t, serverFiles(t, ca, 2, nil))
	eventually(t, "a new connection is served serial 2", served(2))
	if err := roundTrip(before); err != nil {
		t.Errorf("the connection opened before the swap: %v", err)
	}
	if got := before.ConnectionState().PeerCertificates[0].SerialNumber.Int64(); got != 1 {
		t.Errorf("the connection opened before the swap has serial %d, want 1", got)
	}
	if got := r.Certificate().SerialNumber.Int64(); got != 2 {
		t.Errorf("Certificate() serial %d, want 2", got)
	}
	if got, want := expiry(), float64(certtest.NotAfter(2).Unix()); got != want {
		t.Errorf("expiry %v, want %v", got, want)
	}
	if got := logLines(logs, "msg=\"tls certificate reloaded\" serial=2 not_after=2030-01-03"); len(got) != 1 {
		t.Errorf("reload info lines %q, want one", got)
	}

	// A garbled certificate: the error is counted once, serial 2 stays.
	garbled := serverFiles(t, ca, 3, nil)
	garbled["tls.crt"] = garbled["tls.crt"][:100]
	v.Update(t, garbled)
	eventually(t, "one reload error", func() bool { return testutil.ToFloat64(r.reloadErrors) == 1 })
	for range 3 {
		if got := servedSerial(t, addr, client); got != 2 {
			t.Fatalf("after a garbled tls.crt: served serial %d, want 2", got)
		}
	}
	if got := logLines(logs, "level=WARN"); len(got) != 1 || !strings.Contains(got[0], "key=tls.cert_file") {
		t.Errorf("warning lines %q, want one naming tls.cert_file", got)
	}

	// A certificate with the key of another, as a half-done update: also
	// refused; the next good update is taken.
	mismatched := serverFiles(t, ca, 4, nil)
	mismatched["tls.key"] = serverFiles(t, ca, 5, nil)["tls.key"]
	v.Update(t, mismatched)
	eventually(t, "two reload errors", func() bool { return testutil.ToFloat64(r.reloadErrors) == 2 })
	if got := servedSerial(t, addr, client); got != 2 {
		t.Fatalf("after a mismatched key: served serial %d, want 2", got)
	}
	if got := logLines(logs, "level=WARN"); len(got) != 2 || !strings.Contains(got[1], "key=tls.key_file") {
		t.Errorf("warning lines %q, want the second naming tls.key_file", got)
	}

	v.Update(t, serverFiles(t, ca, 6, nil))
	eventually(t, "a new connection is served serial 6", served(6))
	if got := testutil.ToFloat64(r.reloadErrors); got != 2 {
		t.Errorf("reload errors %v, want still 2", got)
	}
	if got, want := expiry(), float64(certtest.NotAfter(6).Unix()); got != want {
		t.Errorf("expiry %v, want %v", got, want)
	}
	if err := roundTrip(before); err != nil {
		t.Errorf("the connection opened first, after three swaps: %v", err)
	}
}

// TestWatchFollowsSymlinks serves files that are symlinks into another
// directory, rewritten in place there, and then pointed at a third one:
// only the watch on the directory they resolve to sees the writes, and it
// must move with the symlinks. The poll is out of the way.
func TestWatchFollowsSymlinks(t *testing.T) {
	ca := certtest.NewAuthority(t, "server CA")
	top := t.TempDir()
	write := func(dir string, f files) {
		t.Helper()
		for name, b := range f {
			// In place and not atomic, as an editor or cp does.
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	link := func(dir string) {
		t.Helper()
		for _, name := range []string{"tls.crt", "tls.key"} {
			tmp := filepath.Join(top, "links", name+".tmp")
			if err := os.Symlink(filepath.Join(dir, name), tmp); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(top, "links", name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, d := range []string{"links", "v1", "v2"} {
		if err := os.Mkdir(filepath.Join(top, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	v1, v2 := filepath.Join(top, "v1"), filepath.Join(top, "v2")
	write(v1, serverFiles(t, ca, 1, nil))
	link(v1)
	r := start(t, Options{
		CertFile: filepath.Join(top, "links", "tls.crt"),
		KeyFile:  filepath.Join(top, "links", "tls.key"),
		Poll:     time.Hour,
	}, nil)
	serial := func(n int64) func() bool {
		return func() bool { return r.Certificate().SerialNumber.Int64() == n }
	}

	write(v1, serverFiles(t, ca, 2, nil))
	eventually(t, "serial 2 written in place", serial(2))

	write(v2, serverFiles(t, ca, 3, nil))
	link(v2)
	eventually(t, "serial 3 by the symlinks", serial(3))

	write(v2, serverFiles(t, ca, 4, nil))
	eventually(t, "serial 4 written in place in the new directory", serial(4))
	if err := os.RemoveAll(v1); err != nil {
		t.Fatal(err)
	}
	write(v2, serverFiles(t, ca, 5, nil))
	eventually(t, "serial 5 written in place, the old directory gone", serial(5))
}

// TestPoll leaves fsnotify out: the poll alone picks up a change, and
// counts a bad one once however often it sees it.
func TestPoll(t *testing.T) {
	ca := certtest.NewAuthority(t, "server CA")
	v := certtest.NewVolume(t, serverFiles(t, ca, 1, nil))
	o := options(v)
	o.Poll = 200 * time.Millisecond
	r := start(t, o, func(r *Reloader) { r.noWatch = true })
	addr := serve(t, r.ServerConfig())
	client := clientConfig(ca)

	v.Update(t, serverFiles(t, ca, 2, nil))
	eventually(t, "serial 2 by the poll", func() bool { return servedSerial(t, addr, client) == 2 })

	garbled := serverFiles(t, ca, 3, nil)
	garbled["tls.key"] = []byte("-----BEGIN PRIVATE KEY-----\nMII")
	v.Update(t, garbled)
	eventually(t, "one reload error", func() bool { return testutil.ToFloat64(r.reloadErrors) == 1 })
	time.Sleep(5 * o.Poll)
	if got := testutil.ToFloat64(r.reloadErrors); got != 1 {
		t.Errorf("reload errors %v after more polls of the same files, want 1", got)
	}
	if got := servedSerial(t, addr, client); got != 2 {
		t.Errorf("served serial %d, want 2", got)
	}
}

func TestMutualTLS(t *testing.T) {
	ca := certtest.NewAuthority(t, "server CA")
	clientsA := certtest.NewAuthority(t, "client CA A")
	clientsB := certtest.NewAuthority(t, "client CA B")
	v := certtest.NewVolume(t, serverFiles(t, ca, 1, clientsA))
	o := options(v)
	o.Poll = time.Hour
	r := start(t, o, nil)
	addr := serve(t, r.ServerConfig())
	certA, certB := clientsA.ClientCert(t, 10), clientsB.ClientCert(t, 20)

	// Sessions of the client of CA A, resumed across the CA rotation.
	sessions := map[uint16]tls.ClientSessionCache{
		tls.VersionTLS12: tls.NewLRUClientSessionCache(4),
		tls.VersionTLS13: tls.NewLRUClientSessionCache(4),
	}
	resumed := false
	dial := func(version uint16, cert *tls.Certificate) error {
		cfg := clientConfig(ca)
		cfg.MaxVersion = version
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		if cert == &certA {
			cfg.ClientSessionCache = sessions[version]
		}
		c, err := connect(addr, cfg)
		if err == nil {
			resumed = c.ConnectionState().DidResume
			c.Close()
		}
		return err
	}
	for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		name := tls.VersionName(version)
		if err := dial(version, nil); err == nil {
			t.Errorf("%s without a client certificate: connected", name)
		}
		if err := dial(version, &certB); err == nil {
			t.Errorf("%s with a certificate of another CA: connected", name)
		}
		for i := range 2 {
			if err := dial(version, &certA); err != nil {
				t.Errorf("%s with a certificate of the client CA: %v", name, err)
			} else if i == 1 && !resumed {
				t.Errorf("%s with a certificate of the client CA: the second connection did not resume the session", name)
			}
		}
	}

	v.Update(t, serverFiles(t, ca, 2, clientsB))
	eventually(t, "the certificate of CA B accepted", func() bool { return dial(tls.VersionTLS13, &certB) == nil })
	for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		if err := dial(version, &certA); err == nil {
			t.Errorf("%s with a certificate of the CA rotated out, resuming its session: connected", tls.VersionName(version))
		}
		if err := dial(version, nil); err == nil {
			t.Errorf("%s without a client certificate: connected", tls.VersionName(version))
		}
	}
}

// fixedServer serves a certificate of serial 1 signed by the CA it
// returns, with the ServerConfig of nextProtos, without running the
// Reloader.
func fixedServer(t *testing.T, nextProtos ...string) (*certtest.Authority, *Reloader, string) {
	t.Helper()
	ca := certtest.NewAuthority(t, "server CA")
	v := certtest.NewVolume(t, serverFiles(t, ca, 1, nil))
	r, err := New(options(v))
	if err != nil {
		t.Fatal(err)
	}
	return ca, r, serve(t, r.ServerConfig(nextProtos...))
}

func TestVersions(t *testing.T) {
	ca, _, addr := fixedServer(t)

	old := clientConfig(ca)
	old.MinVersion, old.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	if _, err := connect(addr, old); err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("a TLS 1.1 client: error %v, want the server's protocol version alert", err)
	}
	tls12 := clientConfig(ca)
	tls12.MaxVersion = tls.VersionTLS12
	c, err := connect(addr, tls12)
	if err != nil {
		t.Fatalf("a TLS 1.2 client: %v", err)
	}
	c.Close()
}

func TestServerConfigProtocols(t *testing.T) {
	ca, r, addr := fixedServer(t, "h2", "http/1.1")
	for _, offer := range [][]string{{"h2"}, {"http/1.1"}, {"h2", "http/1.1"}} {
		cfg := clientConfig(ca)
		cfg.NextProtos = offer
		c, err := connect(addr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.ConnectionState().NegotiatedProtocol; got != offer[0] {
			t.Errorf("client offering %q: negotiated %q, want %q", offer, got, offer[0])
		}
		c.Close()
	}
	if cfg := r.ServerConfig("h2"); cfg.MinVersion != tls.VersionTLS12 || cfg.GetCertificate == nil {
		t.Errorf("ServerConfig: MinVersion %x, GetCertificate set %v", cfg.MinVersion, cfg.GetCertificate != nil)
	}
}
