package certreload

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"fmt"
	"os"
	"strings"
)

// The config keys a KeyError names.
const (
	keyCert = "tls.cert_file"
	keyKey  = "tls.key_file"
	keyCA   = "tls.client_ca_file"
)

// KeyError is a problem of one config key ("tls.cert_file", "tls.key_file",
// "tls.client_ca_file"): the file it names is missing, unreadable, not PEM,
// does not parse or, for the key, does not match the certificate.
type KeyError struct{ Key, Msg string }

func (e *KeyError) Error() string { return e.Key + ": " + e.Msg }

// state is what is in service: replaced as a whole by a good reload.
type state struct {
	cert      *tls.Certificate // Leaf set
	clientCAs *x509.CertPool   // nil: no mTLS
	sum       [sha256.Size]byte
}

// contents are the three files as one read found them.
type contents struct {
	cert, key, ca []byte // ca nil without a client CA file
	err           *KeyError
}

// read reads the files through their symlinks; it stops at the first that
// cannot be read.
func read(o *Options) contents {
	var c contents
	files := []struct {
		key, path string
		to        *[]byte
	}{{keyCert, o.CertFile, &c.cert}, {keyKey, o.KeyFile, &c.key}, {keyCA, o.ClientCAFile, &c.ca}}
	for _, f := range files {
		if f.path == "" {
			continue
		}
		b, err := os.ReadFile(f.path)
		if err != nil {
			c.err = &KeyError{f.key, err.Error()}
			return c
		}
		*f.to = b
	}
	return c
}

// sum tells contents apart: the same files, or the same read error, give
// the same sum.
func (c contents) sum() [sha256.Size]byte {
	h := sha256.New()
	for _, b := range [][]byte{c.cert, c.key, c.ca} {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(b))))
		h.Write(b)
	}
	if c.err != nil {
		h.Write([]byte(c.err.Error()))
	}
	var s [sha256.Size]byte
	h.Sum(s[:0])
	return s
}

// parse makes the state of c, or names the key of the first thing wrong.
func parse(o *Options, c contents) (*state, *KeyError) {
	if c.err != nil {
		return nil, c.err
	}
	certs, err := certificates(c.cert, o.CertFile)
	if err != nil {
		return nil, &KeyError{keyCert, err.Error()}
	}
	leaf := certs[0]
	key, err := privateKey(c.key, o.KeyFile)
	if err != nil {
		return nil, &KeyError{keyKey, err.Error()}
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(leaf.PublicKey) {
		return nil, &KeyError{keyKey, fmt.Sprintf("%s does not match tls.cert_file %s", o.KeyFile, o.CertFile)}
	}
	chain := make([][]byte, len(certs))
	for i, cert := range certs {
		chain[i] = cert.Raw
	}
	st := &state{
		cert: &tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf},
		sum:  c.sum(),
	}
	if o.ClientCAFile != "" {
		cas, err := certificates(c.ca, o.ClientCAFile)
		if err != nil {
			return nil, &KeyError{keyCA, err.Error()}
		}
		st.clientCAs = x509.NewCertPool()
		for _, ca := range cas {
			st.clientCAs.AddCert(ca)
		}
	}
	return st, nil
}

// certificates parses every CERTIFICATE block of the PEM b, in order (other
// blocks are skipped); path names the file in errors.
func certificates(b []byte, path string) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: certificate %d: %w", path, len(certs)+1, err)
		}
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("no PEM certificate in %s", path)
	}
	return certs, nil
}

// privateKey parses the first PRIVATE KEY block of the PEM b (PKCS #8,
// PKCS #1 or SEC 1, as crypto/tls reads them).
func privateKey(b []byte, path string) (crypto.Signer, error) {
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return nil, fmt.Errorf("no PEM private key in %s", path)
		}
		if block.Type != "PRIVATE KEY" && !strings.HasSuffix(block.Type, " PRIVATE KEY") {
			continue
		}
		if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
			switch k := k.(type) {
			case *rsa.PrivateKey, *ecdsa.PrivateKey, ed25519.PrivateKey:
				return k.(crypto.Signer), nil
			}
			return nil, fmt.Errorf("%s: a %T is not a key crypto/tls can sign with", path, k)
		}
		if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
			return k, nil
		}
		if k, err := x509.ParseECPrivateKey(block.Bytes); err == nil {
			return k, nil
		}
		return nil, fmt.Errorf("%s: the %s block does not parse (PKCS #8, PKCS #1 or SEC 1, unencrypted)", path, block.Type)
	}
}
