package main

import (
	"crypto/tls"
	"crypto/x509"
	"maps"
	"os"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func TestReadServed(t *testing.T) {
	file := "tls:\n  cert_file: /file/tls.crt\n  key_file: /file/tls.key\noperator:\n  addr: \":7000\"\n"
	for _, test := range []struct {
		name         string
		content      string
		env          map[string]string
		wantFiles    map[string]string
		wantOperator string
	}{
		{"nothing set", "http:\n  addr: \":8080\"\n", nil, map[string]string{}, ""},
		{"from the file", file, nil, map[string]string{"tls.cert_file": "/file/tls.crt", "tls.key_file": "/file/tls.key"}, ":7000"},
		{
			"a variable wins, an empty one does not",
			file,
			map[string]string{"SHEBA_TLS_CERT_FILE": "/env/tls.crt", "SHEBA_TLS_KEY_FILE": "", "SHEBA_TLS_CLIENT_CA_FILE": "/env/ca.crt", "SHEBA_OPERATOR_ADDR": ":8081"},
			map[string]string{"tls.cert_file": "/env/tls.crt", "tls.key_file": "/file/tls.key", "tls.client_ca_file": "/env/ca.crt"},
			":8081",
		},
		{"a file that is not YAML sets nothing", "tls: [", map[string]string{"SHEBA_TLS_CERT_FILE": "/env/tls.crt"}, map[string]string{"tls.cert_file": "/env/tls.crt"}, ""},
	} {
		t.Run(test.name, func(t *testing.T) {
			got := readServed(test.content, test.env)
			if !maps.Equal(got.files, test.wantFiles) {
				t.Errorf("files: got %v, want %v", got.files, test.wantFiles)
			}
			if got.operatorAddr != test.wantOperator {
				t.Errorf("operator.addr: got %q, want %q", got.operatorAddr, test.wantOperator)
			}
		})
	}
}

func TestMountOf(t *testing.T) {
	ctr := corev1.Container{VolumeMounts: []corev1.VolumeMount{
		{Name: "config", MountPath: "/etc/sheba"},
		{Name: "nested", MountPath: "/etc/sheba/tls/"},
		{Name: "one", MountPath: "/etc/one.crt", SubPath: "certs/tls.crt"},
		{Name: "dir", MountPath: "/etc/dir", SubPath: "certs"},
	}}
	for _, test := range []struct {
		file, wantMount, wantRel string
		wantOK                   bool
	}{
		{"/etc/sheba/config.yaml", "config", "config.yaml", true},
		{"/etc/sheba/tls/tls.crt", "nested", "tls.crt", true},
		{"/etc/sheba/tls/../config.yaml", "config", "config.yaml", true},
		{"/etc/one.crt", "one", "certs/tls.crt", true},
		{"/etc/dir/ca.crt", "dir", "certs/ca.crt", true},
		{"/etc/sheba", "", "", false},
		{"/etc/shebah/tls.crt", "", "", false},
	} {
		m, rel, ok := mountOf(ctr, test.file)
		if ok != test.wantOK || m.Name != test.wantMount || rel != test.wantRel {
			t.Errorf("mountOf(%q) = %q, %q, %v; want %q, %q, %v", test.file, m.Name, rel, ok, test.wantMount, test.wantRel, test.wantOK)
		}
	}
}

func TestExecFlag(t *testing.T) {
	args := []string{"-addr", ":9090", "--tls", "-tls-ca-cert=/etc/ca.crt", "-tls-no-verify=false"}
	for _, test := range []struct {
		name      string
		isBool    bool
		wantValue string
		wantSet   bool
	}{
		{"addr", false, ":9090", true},
		{"tls", true, "true", true},
		{"tls-ca-cert", false, "/etc/ca.crt", true},
		{"tls-no-verify", true, "false", true},
		{"tls-client-cert", false, "", false},
	} {
		v, set := execFlag(args, test.name, test.isBool)
		if v != test.wantValue || set != test.wantSet {
			t.Errorf("execFlag(%q) = %q, %v; want %q, %v", test.name, v, set, test.wantValue, test.wantSet)
		}
	}
}

// TestCertificateExample checks the cert-manager example of the tls
// component against what the component renders: it fills the Secret the
// pods mount, for names of the Service, and it is not among the
// component's resources (kubecheck knows no Certificate kind).
func TestCertificateExample(t *testing.T) {
	data, err := os.ReadFile("../kubernetes/components/tls/certificate.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cert struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Spec struct {
			SecretName string   `json:"secretName"`
			DNSNames   []string `json:"dnsNames"`
			IssuerRef  struct {
				Name string `json:"name"`
			} `json:"issuerRef"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &cert); err != nil {
		t.Fatal(err)
	}
	if cert.APIVersion != "cert-manager.io/v1" || cert.Kind != "Certificate" {
		t.Errorf("got %s %s, want cert-manager.io/v1 Certificate", cert.APIVersion, cert.Kind)
	}
	if cert.Spec.IssuerRef.Name == "" {
		t.Error("spec.issuerRef.name is empty: the example must show where the issuer goes")
	}

	rendered, err := checker{modfile: "../../tools/go.mod"}.render(t.Context(), "testdata/ok-tls")
	if err != nil {
		t.Fatal(err)
	}
	objs, problems, err := decode(rendered)
	if err != nil || len(problems) > 0 {
		t.Fatalf("decode: %v %v", err, problems)
	}
	if len(objs.deployments) != 1 || len(objs.services) != 1 {
		t.Fatalf("got %d Deployments and %d Services, want one each", len(objs.deployments), len(objs.services))
	}
	var secrets []string
	for _, v := range objs.deployments[0].Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			secrets = append(secrets, v.Secret.SecretName)
		}
	}
	if !slices.Contains(secrets, cert.Spec.SecretName) {
		t.Errorf("spec.secretName %q is none of the Secrets the pods mount: %v", cert.Spec.SecretName, secrets)
	}
	svc := objs.services[0].Name
	for _, name := range []string{svc, svc + "." + cert.Metadata.Namespace + ".svc"} {
		if !slices.Contains(cert.Spec.DNSNames, name) {
			t.Errorf("spec.dnsNames %v lack %q, a name of Service %s in namespace %s", cert.Spec.DNSNames, name, svc, cert.Metadata.Namespace)
		}
	}
}

// TestWriteStandInTLS checks that the stand-in files are what a TLS server
// loads: a key that matches its certificate, which the CA file verifies.
func TestWriteStandInTLS(t *testing.T) {
	files, err := writeStandInTLS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(files["tls.cert_file"], files["tls.key_file"])
	if err != nil {
		t.Fatalf("certificate and key: %v", err)
	}
	caPEM, err := os.ReadFile(files["tls.client_ca_file"])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("the CA file holds no certificate")
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "sheba"}); err != nil {
		t.Errorf("the CA does not verify the certificate: %v", err)
	}
}
