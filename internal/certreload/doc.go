// Package certreload serves TLS from certificate files that change while
// sheba runs, as a Kubernetes Secret volume does when the Secret is updated
// (docs/tls.md).
//
// New reads the certificate, its key and the optional client CA once, and
// returns a *KeyError naming the config key of the first file that is
// missing, is not PEM, does not parse or, for the key, does not match the
// certificate. Run then watches the files until its context ends: fsnotify
// on the directory of each file and on the directory each file resolves to
// through its symlinks, plus a poll (10 s by default) as a backstop. After
// every check the watches are set again from where the symlinks now point,
// so the timestamped directory of a Secret volume, which the kubelet
// replaces by swapping the ..data symlink and then deletes, is followed from
// one update to the next.
//
// A check reads the three files through their symlinks and compares their
// content with the last content it tried. New content is loaded as a whole:
// if anything in it fails (a half-written file, a certificate and key that
// do not match yet), the certificate, chain and client CAs in service stay,
// one warning line names the key and the error, and
// sheba_tls_reload_errors_total goes up once; the same content is not tried
// again, the next change is. A good load replaces them at once (one info
// line with the serial and expiry of the new certificate).
//
// ServerConfig returns the *tls.Config the listeners serve with: TLS 1.2 at
// the least, and a GetConfigForClient that hands each new handshake the
// current certificate and, with a client CA, requires and verifies a client
// certificate signed by it. Connections already open keep the certificate
// they were made with; nothing is closed on a reload.
//
// sheba_tls_certificate_expiry_timestamp_seconds is read from the
// certificate in service when it is scraped.
package certreload
