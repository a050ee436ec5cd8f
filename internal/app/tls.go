package app

import (
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/internal/certreload"
)

// newCerts loads the certificate of both listeners from the tls section
// (docs/tls.md), its metrics on reg (nil: none); nil when TLS is off. A
// problem of one file is a *config.Error naming its key.
func newCerts(c config.TLS, log *slog.Logger, reg prometheus.Registerer) (*certreload.Reloader, error) {
	if !c.Enabled() {
		return nil, nil
	}
	r, err := certreload.New(certreload.Options{
		CertFile: c.CertFile, KeyFile: c.KeyFile, ClientCAFile: c.ClientCAFile,
		Log: log, Registerer: reg,
	})
	if ke, ok := errors.AsType[*certreload.KeyError](err); ok {
		return nil, &config.Error{Key: ke.Key, Msg: ke.Msg}
	}
	return r, err
}

// CheckTLS reads and checks the files of the tls section, as New will:
// for the command, which must refuse them (exit 2) before anything
// connects. A problem of one file is a *config.Error naming its key.
func CheckTLS(c config.TLS) error {
	_, err := newCerts(c, nil, nil)
	return err
}
