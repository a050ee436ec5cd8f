// Package certtest is the TLS material of sheba's tests: a certificate
// authority made in the test, the server and client certificates it
// issues for 127.0.0.1 and localhost, and a directory laid out as the
// kubelet lays out a Secret volume, updated as the kubelet updates it. The
// tests of certreload and the system tests (e2e) use it alike.
//
// Like net/http/httptest it is for tests only: no code of sheba outside
// _test.go files imports it.
package certtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Authority is a CA made for a test: an ECDSA P-256 key and a self-signed
// certificate of serial 1, valid from an hour ago for a year.
type Authority struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	PEM  []byte // Cert in PEM, as a ca.crt holds it
}

// NewAuthority makes a CA of the common name name.
func NewAuthority(tb testing.TB, name string) *Authority {
	tb.Helper()
	key := newKey(tb)
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
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return &Authority{Cert: cert, Key: key, PEM: EncodePEM("CERTIFICATE", der)}
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return key
}

// EncodePEM is der in a PEM block of the type typ.
func EncodePEM(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// NotAfter is the expiry of the certificates of serial n that an
// Authority issues: midnight UTC on 1 January 2030 plus n days, so that
// each serial's is known and a day apart from the next.
func NotAfter(n int64) time.Time {
	return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(n) * 24 * time.Hour)
}

// Issue signs a certificate of serial n, of the common name "serial n",
// valid from an hour ago until NotAfter(n), and returns it in PEM with its
// ECDSA P-256 key (PKCS #8, a PRIVATE KEY block). Without client it is a
// server's, for localhost and 127.0.0.1; with client it is a client's,
// without names.
func (a *Authority) Issue(tb testing.TB, n int64, client bool) (certPEM, keyPEM []byte) {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(n),
		Subject:      pkix.Name{CommonName: fmt.Sprintf("serial %d", n)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     NotAfter(n),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		tmpl.DNSNames, tmpl.IPAddresses = nil, nil
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.Cert, &key.PublicKey, a.Key)
	if err != nil {
		tb.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	return EncodePEM("CERTIFICATE", der), EncodePEM("PRIVATE KEY", kder)
}

// ClientCert is a client certificate of serial n issued by a, with its
// key, as a tls.Config's Certificates take it.
func (a *Authority) ClientCert(tb testing.TB, n int64) tls.Certificate {
	tb.Helper()
	c, k := a.Issue(tb, n, true)
	cert, err := tls.X509KeyPair(c, k)
	if err != nil {
		tb.Fatal(err)
	}
	return cert
}

// Pool is a new pool of a's certificate alone, for a tls.Config's RootCAs
// or ClientCAs.
func (a *Authority) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(a.Cert)
	return p
}

// Volume is a directory, Dir, laid out as the kubelet lays out a Secret
// volume: the files in a timestamped directory, ..data a symlink to it,
// and each file a symlink through ..data.
type Volume struct {
	Dir string
	n   int // updates so far
}

// NewVolume lays files (names and contents, as a Secret's keys) out in a
// new directory that is removed when the test ends.
func NewVolume(tb testing.TB, files map[string][]byte) *Volume {
	tb.Helper()
	v := &Volume{Dir: tb.TempDir()}
	v.Update(tb, files)
	return v
}

// Path is the path of the file name in the volume.
func (v *Volume) Path(name string) string { return filepath.Join(v.Dir, name) }

// Update writes files into a new timestamped directory, swaps ..data to it
// atomically (a ..data_tmp symlink renamed over ..data), adds the missing
// file symlinks and removes the old directory, as the kubelet does.
func (v *Volume) Update(tb testing.TB, files map[string][]byte) {
	tb.Helper()
	old, _ := os.Readlink(v.Path("..data"))
	v.n++
	ts := fmt.Sprintf("..2026_12_02_10_00_%02d.%d", v.n, v.n)
	if err := os.Mkdir(v.Path(ts), 0o755); err != nil {
		tb.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(v.Dir, ts, name), b, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	if err := os.Symlink(ts, v.Path("..data_tmp")); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(v.Path("..data_tmp"), v.Path("..data")); err != nil {
		tb.Fatal(err)
	}
	for name := range files {
		if _, err := os.Lstat(v.Path(name)); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), v.Path(name)); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if old != "" {
		if err := os.RemoveAll(v.Path(old)); err != nil {
			tb.Fatal(err)
		}
	}
}
