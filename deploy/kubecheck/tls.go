package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/shebasvc/sheba/config"
)

// tlsFiles are the TLS settings (docs/tls.md) that name files, with the
// variables that override them. The key file is the one secret among them.
var tlsFiles = []struct {
	key, env string
	private  bool
}{
	{"tls.cert_file", "SHEBA_TLS_CERT_FILE", false},
	{"tls.key_file", "SHEBA_TLS_KEY_FILE", true},
	{"tls.client_ca_file", "SHEBA_TLS_CLIENT_CA_FILE", false},
}

// operatorAddrEnv overrides operator.addr.
const operatorAddrEnv = "SHEBA_OPERATOR_ADDR"

// served is what sheba serves by its config: the loaded config, and the
// TLS settings (docs/tls.md), which kubecheck reads from the file and the
// environment itself. It needs the TLS paths before sheba judges the
// config, to stand in for the Secret's files, and the config package of
// this repository may not know the section yet.
type served struct {
	config.Config
	// files holds each set TLS file by key (tls.cert_file...).
	files        map[string]string
	operatorAddr string
}

// tlsOn says whether the business ports serve TLS only.
func (s served) tlsOn() bool { return s.files["tls.cert_file"] != "" }

// mtlsOn says whether business connections need a client certificate.
func (s served) mtlsOn() bool { return s.tlsOn() && s.files["tls.client_ca_file"] != "" }

// listener is one address sheba listens on.
type listener struct {
	key, addr string
	port      int32 // 0 when addr has no port
	tls       bool
}

func (l listener) String() string {
	mode := "plaintext"
	if l.tls {
		mode = "TLS only"
	}
	return fmt.Sprintf("%s %s (%s)", l.key, l.addr, mode)
}

// listeners returns the addresses sheba listens on: http.addr, grpc.addr
// and, when set, operator.addr, which is always plaintext.
func (s served) listeners() []listener {
	ls := []listener{
		{key: "http.addr", addr: s.HTTP.Addr, tls: s.tlsOn()},
		{key: "grpc.addr", addr: s.GRPC.Addr, tls: s.tlsOn()},
	}
	if s.operatorAddr != "" {
		ls = append(ls, listener{key: "operator.addr", addr: s.operatorAddr})
	}
	for i, l := range ls {
		_, portText, err := net.SplitHostPort(l.addr)
		if port, perr := strconv.ParseUint(portText, 10, 16); err == nil && perr == nil {
			ls[i].port = int32(port)
		}
	}
	return ls
}

// listenerOn returns the listener on port, if sheba has one.
func (s served) listenerOn(port int32) (listener, bool) {
	for _, l := range s.listeners() {
		if l.port != 0 && l.port == port {
			return l, true
		}
	}
	return listener{}, false
}

// readServed reads the TLS settings (docs/tls.md) from the config file and
// the container's environment, as config.Load would: a variable that is
// set and not empty wins over the file. A file that is not YAML sets
// nothing here; sheba config check reports it.
func readServed(content string, env map[string]string) served {
	var file struct {
		TLS struct {
			CertFile     string `json:"cert_file"`
			KeyFile      string `json:"key_file"`
			ClientCAFile string `json:"client_ca_file"`
		} `json:"tls"`
		Operator struct {
			Addr string `json:"addr"`
		} `json:"operator"`
	}
	_ = yaml.Unmarshal([]byte(content), &file)
	pick := func(fromFile, name string) string {
		if v := env[name]; v != "" {
			return v
		}
		return fromFile
	}
	fromFile := map[string]string{
		"tls.cert_file":      file.TLS.CertFile,
		"tls.key_file":       file.TLS.KeyFile,
		"tls.client_ca_file": file.TLS.ClientCAFile,
	}
	s := served{files: map[string]string{}, operatorAddr: pick(file.Operator.Addr, operatorAddrEnv)}
	for _, f := range tlsFiles {
		if v := pick(fromFile[f.key], f.env); v != "" {
			s.files[f.key] = v
		}
	}
	return s
}

// checkTLSFiles checks that each TLS file sheba reads is a key of a
// Secret or ConfigMap volume (a Secret for the private key), mounted whole
// so that the kubelet swaps in a renewed certificate, required, and
// readable by sheba's user.
func checkTLSFiles(o object, spec corev1.PodSpec, ctr corev1.Container, s served, r *report) {
	var fsGroup *int64
	if spec.SecurityContext != nil {
		fsGroup = spec.SecurityContext.FSGroup
	}
	var found []string
	for _, f := range tlsFiles {
		file := s.files[f.key]
		if file == "" {
			continue
		}
		at := fmt.Sprintf("%s: container %q: %s %s", o, ctr.Name, f.key, file)
		m, rel, ok := mountOf(ctr, file)
		if !ok {
			r.problemf("%s is on no mounted volume: mount the Secret that holds it", at)
			continue
		}
		vol := volumeNamed(spec, m.Name)
		var items []corev1.KeyToPath
		var defaultMode *int32
		var optional *bool
		var source string
		switch {
		case vol == nil:
			continue // checkPodSpec reports the mount of no volume
		case vol.Secret != nil:
			items, defaultMode, optional = vol.Secret.Items, vol.Secret.DefaultMode, vol.Secret.Optional
			source = "Secret " + vol.Secret.SecretName
		case vol.ConfigMap != nil && !f.private:
			items, defaultMode, optional = vol.ConfigMap.Items, vol.ConfigMap.DefaultMode, vol.ConfigMap.Optional
			source = "ConfigMap " + vol.ConfigMap.Name
		case f.private:
			r.problemf("%s is on volume %q, which is not a Secret: a private key belongs in a Secret", at, m.Name)
			continue
		default:
			r.problemf("%s is on volume %q, which is neither a Secret nor a ConfigMap", at, m.Name)
			continue
		}
		if m.SubPath != "" {
			r.problemf("%s is mounted with subPath %q, which the kubelet never updates: a renewed certificate would wait for a restart; mount the whole volume", at, m.SubPath)
			continue
		}
		key, mode, ok := volumeKey(items, rel)
		if !ok {
			r.problemf("%s: volume %q projects no item to %s", at, m.Name, rel)
			continue
		}
		if optional != nil && *optional {
			r.problemf("%s: volume %q must not be optional: without the file sheba does not start", at, m.Name)
		}
		if mode == nil {
			mode = defaultMode
		}
		perm := int32(corev1.SecretVolumeSourceDefaultMode)
		if mode != nil {
			perm = *mode
		}
		// The kubelet writes the files as root. With fsGroup it gives that
		// group read, and the container's processes are in it.
		if perm&0o004 == 0 && fsGroup == nil {
			r.problemf("%s: mode %#o on volume %q lets only root (user and group) read it, and sheba runs as another user: set the pod's securityContext.fsGroup", at, perm, m.Name)
			continue
		}
		found = append(found, fmt.Sprintf("%s → %s key %s", f.key, source, key))
	}
	if len(found) > 0 && len(found) == len(s.files) {
		r.notef("%s: container %q reads %s, each on a whole volume the kubelet updates in place, readable by its user", o, ctr.Name, strings.Join(found, ", "))
	}
}

// writeStandInTLS writes a throwaway CA, and a server certificate and key
// it signed, into dir, for sheba config check to read in place of the
// Secret's files, which are not in the repository. It returns each file by
// its key in tlsFiles.
func writeStandInTLS(dir string) (map[string]string, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kubecheck stand-in CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "sheba"},
		DNSNames:     []string{"sheba"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	blocks := map[string]*pem.Block{
		"tls.cert_file":      {Type: "CERTIFICATE", Bytes: leafDER},
		"tls.key_file":       {Type: "PRIVATE KEY", Bytes: keyDER},
		"tls.client_ca_file": {Type: "CERTIFICATE", Bytes: caDER},
	}
	files := map[string]string{}
	for k, b := range blocks {
		name := filepath.Join(dir, strings.TrimPrefix(k, "tls.")+".pem")
		if err := os.WriteFile(name, pem.EncodeToMemory(b), 0o600); err != nil {
			return nil, err
		}
		files[k] = name
	}
	return files, nil
}
