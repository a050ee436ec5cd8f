package certreload

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Options are the files a Reloader serves and how it watches them.
type Options struct {
	CertFile, KeyFile, ClientCAFile string        // ClientCAFile "" = no mTLS
	Poll                            time.Duration // 0 = 10s
	Log                             *slog.Logger  // nil = discard
	// Registerer, when not nil, gets sheba_tls_reload_errors_total and
	// sheba_tls_certificate_expiry_timestamp_seconds; one Reloader per
	// registry (the HTTP and gRPC servers share one).
	Registerer prometheus.Registerer
}

const defaultPoll = 10 * time.Second

// Reloader holds the certificate in service and replaces it when its files
// change (see the package doc). It is safe for concurrent use.
type Reloader struct {
	o   Options
	cur atomic.Pointer[state]

	// tried is the sum of the last contents loaded, well or not; only
	// Run's goroutine uses it.
	tried [sha256.Size]byte

	reloadErrors prometheus.Counter
	expiry       prometheus.GaugeFunc

	// For tests: noWatch leaves fsnotify out of Run (the poll alone
	// notices changes); running is called once Run watches.
	noWatch bool
	running func()
}

// New reads and checks the files once. A file missing or unreadable, not
// PEM, not parsing, or a key not matching the certificate is a *KeyError
// naming the key of the first such file; so is a client CA without a
// certificate. Any other error is the Registerer's.
func New(o Options) (*Reloader, error) {
	switch {
	case o.CertFile == "" && o.ClientCAFile != "":
		return nil, &KeyError{keyCA, "needs " + keyCert}
	case o.CertFile == "":
		return nil, &KeyError{keyCert, "not set"}
	case o.KeyFile == "":
		return nil, &KeyError{keyKey, "not set; " + keyCert + " needs it"}
	}
	if o.Poll <= 0 {
		o.Poll = defaultPoll
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	st, kerr := parse(&o, read(&o))
	if kerr != nil {
		return nil, kerr
	}
	r := &Reloader{o: o, tried: st.sum}
	r.cur.Store(st)
	r.reloadErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sheba_tls_reload_errors_total",
		Help: "Changes of the TLS files that could not be loaded (a file missing, half-written or not parsing, a key not matching): the certificate in service stayed.",
	})
	r.expiry = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sheba_tls_certificate_expiry_timestamp_seconds",
		Help: "When the TLS certificate in service expires (its NotAfter), in seconds since the Unix epoch.",
	}, func() float64 { return float64(r.Certificate().NotAfter.Unix()) })
	if o.Registerer != nil {
		for _, c := range []prometheus.Collector{r.reloadErrors, r.expiry} {
			if err := o.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("certreload: %w", err)
			}
		}
	}
	return r, nil
}

// Certificate is the leaf certificate in service.
func (r *Reloader) Certificate() *x509.Certificate { return r.cur.Load().cert.Leaf }

// ServerConfig is the config to serve with: TLS 1.2 at the least, ALPN
// offering nextProtos (the HTTP server passes "h2", "http/1.1"; gRPC "h2"),
// and a GetConfigForClient that gives each handshake the certificate in
// service and, with a client CA, requires a client certificate it signed.
// The protocols must be passed here: the config GetConfigForClient returns
// is the one the handshake uses, so NextProtos that net/http adds to a
// clone of this one are not offered (grpc's credentials re-apply theirs to
// each config returned, so gRPC gets "h2" either way).
func (r *Reloader) ServerConfig(nextProtos ...string) *tls.Config {
	protos := slices.Clone(nextProtos)
	type forState struct {
		st  *state
		cfg *tls.Config
	}
	var last atomic.Pointer[forState] // the config of the state in service, made once per state
	forClient := func(*tls.ClientHelloInfo) (*tls.Config, error) {
		st := r.cur.Load()
		if l := last.Load(); l != nil && l.st == st {
			return l.cfg, nil
		}
		cfg := &tls.Config{
			MinVersion:   tls.VersionTLS12,
			NextProtos:   protos,
			Certificates: []tls.Certificate{*st.cert},
		}
		if st.clientCAs != nil {
			cfg.ClientCAs = st.clientCAs
			cfg.ClientAuth = tls.RequireAndVerifyClientCert
		}
		last.Store(&forState{st, cfg})
		return cfg, nil
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: protos,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return r.cur.Load().cert, nil
		},
		GetConfigForClient: forClient,
	}
}

// check loads the files if their content is not the last it tried, and
// puts them in service if they load. Only Run's goroutine calls it.
func (r *Reloader) check() {
	for i := 0; ; i++ {
		c := read(&r.o)
		sum := c.sum()
		if sum == r.tried {
			return
		}
		st, kerr := parse(&r.o, c)
		if kerr != nil && i < 2 && read(&r.o).sum() != sum {
			continue // read while the files changed: read them again
		}
		r.tried = sum
		if kerr != nil {
			r.reloadErrors.Inc()
			r.o.Log.Warn("tls reload failed; the certificate in service stays",
				"key", kerr.Key, "error", kerr.Msg)
			return
		}
		if st.sum == r.cur.Load().sum {
			return // back to the files in service after a failed change
		}
		r.cur.Store(st)
		r.o.Log.Info("tls certificate reloaded",
			"serial", fmt.Sprintf("%X", st.cert.Leaf.SerialNumber),
			"not_after", st.cert.Leaf.NotAfter)
		return
	}
}
