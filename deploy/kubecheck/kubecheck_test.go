package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shebasvc/sheba/e2e/shebaproc"
)

// TestKubecheck renders the base and overlays in testdata with the pinned
// kustomize and runs the check as `make deploy-check` does: the base and
// the documented variant pass, and each broken overlay fails naming its
// fault.
func TestKubecheck(t *testing.T) {
	sheba := shebaproc.Binary(t)
	for _, test := range []struct {
		dir      string
		wantCode int
		want     string // in stdout when 0, in stderr otherwise
	}{
		{"../kubernetes", 0, "readinessProbe grpc → 9090, grpc.addr :9090 (plaintext)"},
		{"../kubernetes", 0, "NetworkPolicy sheba selects the pods of Deployment sheba: ingress to http 8080, grpc 9090"},
		{"../kubernetes", 0, "SHEBA_PAGING_SECRET comes from Secret sheba key paging-secret, required"},
		{"testdata/ok-exec-readiness", 0, "readinessProbe exec grpc_health_probe → 9090"},
		{"testdata/ok-tls", 0, "startupProbe httpGet /livez → 8081, operator.addr :8081 (plaintext); livenessProbe httpGet /livez → 8081, operator.addr :8081 (plaintext); readinessProbe grpc → 8081, operator.addr :8081 (plaintext)"},
		{"testdata/ok-tls", 0, "TLS only on http.addr and grpc.addr (tls.cert_file): no probe asks them in plaintext"},
		{"testdata/ok-tls", 0, `container "sheba" reads tls.cert_file → Secret sheba-tls key tls.crt, tls.key_file → Secret sheba-tls key tls.key, each on a whole volume the kubelet updates in place`},
		{"testdata/ok-tls", 0, "sheba's http.addr :8080, grpc.addr :9090 and operator.addr :8081 are container ports"},
		{"testdata/ok-tls", 0, "NetworkPolicies sheba, sheba-operator select the pods of Deployment sheba: ingress to operator 8081, http 8080, grpc 9090"},
		{"testdata/ok-tls", 0, "ports http 8080→http (https), grpc 9090→grpc (https)"},
		{"testdata/ok-mtls", 0, "tls.client_ca_file → Secret sheba-tls key ca.crt"},
		{"testdata/ok-mtls", 0, "no probe asks them in plaintext or without a client certificate"},
		{"testdata/broken-unknown-field", 1, `unknown field "periodSecond"`},
		{"testdata/broken-wrong-type", 1, "cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32"},
		{"testdata/broken-probe-port", 1, "readinessProbe grpc targets port 9091, which container sheba does not declare"},
		{"testdata/broken-grace-period", 1, "terminationGracePeriodSeconds (30s) must be longer than preStop sleep (0s) + shutdown.timeout (30s)"},
		{"testdata/broken-drain-delay", 1, "shutdown.drain_delay (5s) must be longer than the readiness probe's failure window"},
		{"testdata/broken-config", 1, "sheba config check rejects ConfigMap sheba-config-"},
		{"testdata/broken-listen-port", 1, `sheba listens on http.addr ":8081", but container sheba declares no containerPort 8081`},
		{"testdata/broken-service-selector", 1, "Service sheba: spec.selector"},
		{"testdata/broken-writable-root", 1, "readOnlyRootFilesystem must be true"},
		{"testdata/broken-liveness-readyz", 1, "livenessProbe must be httpGet /livez"},
		{"testdata/broken-job-image", 1, `Job sheba-migrate: image "localhost/sheba:old" differs`},
		{"testdata/broken-netpol-selector", 1, "Deployment sheba: no NetworkPolicy selects its pods"},
		{"testdata/broken-netpol-metadata", 1, "lets its pods reach the metadata address 169.254.169.254"},
		{"testdata/broken-netpol-ingress", 1, "no NetworkPolicy ingress rule reaches container port grpc 9090"},
		{"testdata/broken-paging-optional", 1, "SHEBA_PAGING_SECRET's secretKeyRef must not be optional"},
		{"testdata/broken-paging-absent", 1, "container sheba has no SHEBA_PAGING_SECRET from a Secret"},
		{"testdata/broken-dev-key-config", 1, "key config.yaml holds the development API key's hash"},
		{"testdata/broken-dev-key-env", 1, `container "sheba": SHEBA_AUTH_KEYS holds the development API key's hash`},
		{"testdata/broken-tls-probe-http", 1, "livenessProbe httpGet /livez on port 8080: it speaks plaintext to http.addr :8080 (TLS only), which refuses it"},
		{"testdata/broken-tls-exec-readiness", 1, "readinessProbe exec grpc_health_probe on port 9090: it speaks plaintext to grpc.addr :9090 (TLS only)"},
		{"testdata/broken-mtls-https-probe", 1, "readinessProbe httpGet HTTPS /readyz on port 8080: http.addr :8080 (TLS only) wants a client certificate"},
		{"testdata/broken-operator-https", 1, "startupProbe httpGet HTTPS /livez on port 8081: it speaks TLS to operator.addr :8081 (plaintext)"},
		{"testdata/broken-operator-unset", 1, "readinessProbe grpc targets port 8081, where sheba does not listen (http.addr :8080, grpc.addr :9090)"},
		{"testdata/broken-operator-probes-left", 1, "livenessProbe httpGet /livez on port 8080: with operator.addr set (:8081), sheba serves /livez and /readyz there"},
		{"testdata/broken-tls-subpath", 1, `tls.cert_file /etc/sheba-tls/tls.crt is mounted with subPath "tls.crt", which the kubelet never updates`},
		{"testdata/broken-tls-outside-mount", 1, "tls.cert_file /etc/tls/tls.crt is on no mounted volume"},
		{"testdata/broken-tls-unreadable", 1, `tls.key_file /etc/sheba-tls/tls.key: mode 0440 on volume "tls" lets only root (user and group) read it`},
		{"testdata/broken-tls-item", 1, `tls.client_ca_file /etc/sheba-tls/ca.crt: volume "tls" projects no item to ca.crt`},
		{"testdata/broken-tls-service-h2c", 1, `port "grpc" has appProtocol kubernetes.io/h2c, plaintext, but targets grpc.addr :9090 (TLS only)`},
	} {
		t.Run(filepath.Base(test.dir)+": "+test.want, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), []string{"-sheba", sheba, "-modfile", "../../tools/go.mod", test.dir}, &stdout, &stderr)
			if code != test.wantCode {
				t.Fatalf("got exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", code, test.wantCode, stdout.String(), stderr.String())
			}
			out := stdout.String()
			if test.wantCode != 0 {
				out = stderr.String()
			}
			if !strings.Contains(out, test.want) {
				t.Errorf("output does not say %q:\n%s", test.want, out)
			}
			if test.wantCode == 0 && stderr.Len() != 0 {
				t.Errorf("got stderr %q, want none", stderr.String())
			}
		})
	}
}

func TestKubecheckUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), nil, &stdout, &stderr); code != 2 {
		t.Errorf("got exit status %d without a directory, want 2", code)
	}
	if code := run(t.Context(), []string{"-modfile", "../../tools/go.mod", "testdata/no-such-dir"}, &stdout, &stderr); code != 1 {
		t.Errorf("got exit status %d for a missing directory, want 1", code)
	}
}

func TestParseGoBytes(t *testing.T) {
	for _, test := range []struct {
		in   string
		want int64
	}{
		{"448MiB", 448 << 20},
		{"1GiB", 1 << 30},
		{"1024", 1024},
		{"10B", 10},
	} {
		got, err := parseGoBytes(test.in)
		if err != nil || got != test.want {
			t.Errorf("parseGoBytes(%q) = %d, %v; want %d", test.in, got, err, test.want)
		}
	}
	for _, bad := range []string{"", "lots", "448Mi", "-1"} {
		if _, err := parseGoBytes(bad); err == nil {
			t.Errorf("parseGoBytes(%q): got no error", bad)
		}
	}
}

// TestDevKeySHA256 checks that the hash kubecheck refuses is the one of
// config/dev.yaml, and of the key the docs print.
func TestDevKeySHA256(t *testing.T) {
	sum := sha256.Sum256([]byte("sheba-dev-key-not-a-secret"))
	if got := hex.EncodeToString(sum[:]); got != devKeySHA256 {
		t.Errorf("sha256 of the documented key: got %s, want devKeySHA256 %s", got, devKeySHA256)
	}
	dev, err := os.ReadFile("../../config/dev.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(dev), `sha256: "`+devKeySHA256+`"`) {
		t.Errorf("config/dev.yaml does not hold the key hash %s", devKeySHA256)
	}
}
