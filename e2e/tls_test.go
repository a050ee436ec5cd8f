package e2e

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/internal/certreload/certtest"
)

// servedSerial is the serial of the certificate a new TLS connection to
// addr is served.
func servedSerial(t *testing.T, addr string, ca *certtest.Authority) int64 {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

func TestTLS(t *testing.T) {
	t.Parallel()
	e, ca, vol := tlsTestEnv(t)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	get := func(t *testing.T) (*http.Response, bool) {
		t.Helper()
		reused := false
		ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }})
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+e.httpAddr+"/v1/ping", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET over HTTPS: %v", err)
		}
		resp.Body.Close()
		return resp, reused
	}

	t.Run("https and grpc over tls", func(t *testing.T) {
		resp, _ := get(t)
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
			t.Errorf("got %d over HTTP/%d, want 200 over HTTP/2", resp.StatusCode, resp.ProtoMajor)
		}
		conn, err := grpc.NewClient(e.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.Pool()})), withKey(testKey))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := shebav1.NewPingServiceClient(conn).Ping(t.Context(), &shebav1.PingRequest{}); err != nil {
			t.Errorf("Ping over TLS: %v", err)
		}
		// The browser protocols, over HTTPS and HTTP/2.
		for name, opts := range map[string][]connect.ClientOption{"Connect": nil, "gRPC-Web": {connect.WithGRPCWeb()}} {
			c := connect.NewClient[shebav1.PingRequest, shebav1.PingResponse](client, "https://"+e.httpAddr+"/sheba.v1.PingService/Ping", opts...)
			if r, err := c.CallUnary(t.Context(), connect.NewRequest(&shebav1.PingRequest{})); err != nil || r.Msg.GetMessage() != "pong" {
				t.Errorf("Ping over %s and HTTPS: %v, %v", name, r, err)
			}
		}
	})
	t.Run("plaintext refused", func(t *testing.T) {
		resp, err := http.Get("http://" + e.httpAddr + "/v1/ping")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Error("plain HTTP to a TLS http.addr answered 200")
			}
		}
		conn, err := grpc.NewClient(e.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := shebav1.NewPingServiceClient(conn).Ping(t.Context(), &shebav1.PingRequest{}); err == nil {
			t.Error("plaintext gRPC to a TLS grpc.addr worked")
		}
	})
	t.Run("tls 1.1 refused", func(t *testing.T) {
		for _, addr := range []string{e.httpAddr, e.grpcAddr} {
			conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS11})
			if err == nil {
				conn.Close()
				t.Errorf("%s: a TLS 1.1 handshake succeeded", addr)
			}
		}
	})
	t.Run("rotation", func(t *testing.T) {
		if got := servedSerial(t, e.httpAddr, ca); got != 10 {
			t.Fatalf("served serial %d, want 10", got)
		}
		get(t) // a connection opened before the swap
		cert2, key2 := ca.Issue(t, 11, false)
		vol.Update(t, map[string][]byte{"tls.crt": cert2, "tls.key": key2})
		waitFor(t, 15*time.Second, "the new certificate on new connections", func() bool {
			return servedSerial(t, e.httpAddr, ca) == 11 && servedSerial(t, e.grpcAddr, ca) == 11
		})
		if resp, reused := get(t); resp.StatusCode != http.StatusOK || !reused {
			t.Errorf("the HTTP/2 connection opened before: got %d (reused %v), want 200 on it", resp.StatusCode, reused)
		}
		// A file that does not parse leaves the certificate in service.
		vol.Update(t, map[string][]byte{"tls.crt": []byte("-----BEGIN CERTIFICATE-----\ngarbage\n"), "tls.key": key2})
		waitFor(t, 15*time.Second, "sheba_tls_reload_errors_total 1", func() bool {
			f, ok := tryScrapeAt(t, "http://"+e.operatorAddr)
			return ok && series(f, "sheba_tls_reload_errors_total")[""] == 1
		})
		if got := servedSerial(t, e.httpAddr, ca); got != 11 {
			t.Errorf("served serial %d after a garbled file, want 11 still", got)
		}
	})
	t.Run("probes", func(t *testing.T) {
		probe := healthProbe(t)
		caFile := filepath.Join(t.TempDir(), "ca.crt")
		if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"-addr=" + e.grpcAddr, "-tls", "-tls-ca-cert=" + caFile, "-tls-server-name=127.0.0.1"},
			{"-addr=" + e.operatorAddr},
		} {
			out, err := exec.CommandContext(t.Context(), probe, args...).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "status: SERVING") {
				t.Errorf("grpc_health_probe %v: %v %s", args, err, out)
			}
		}
		conn, err := grpc.NewClient(e.operatorAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("plaintext health on the operator port: %v %v", resp.GetStatus(), err)
		}
	})
}

func TestMTLS(t *testing.T) {
	t.Parallel()
	ca, other := certtest.NewAuthority(t, "test CA"), certtest.NewAuthority(t, "another CA")
	cert, key := ca.Issue(t, 20, false)
	vol := certtest.NewVolume(t, map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": ca.PEM})
	e := newTestEnv(t, func(c *config.Config) {
		c.TLS = config.TLS{CertFile: vol.Path("tls.crt"), KeyFile: vol.Path("tls.key"), ClientCAFile: vol.Path("ca.crt")}
	})
	clientCert := func(ca *certtest.Authority) []tls.Certificate {
		return []tls.Certificate{ca.ClientCert(t, 30)}
	}
	for _, test := range []struct {
		name  string
		certs []tls.Certificate
		key   string
		want  int // 0: the handshake fails
	}{
		{name: "no client certificate"},
		{name: "another CA's certificate", certs: clientCert(other), key: testKey},
		{name: "a valid certificate and key", certs: clientCert(ca), key: testKey, want: http.StatusOK},
		{name: "a valid certificate without a key", certs: clientCert(ca), want: http.StatusUnauthorized},
	} {
		t.Run(test.name, func(t *testing.T) {
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: test.certs}}
			defer tr.CloseIdleConnections()
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+e.httpAddr+"/v1/accounts/"+unknownID, nil)
			if test.key != "" {
				req.Header.Set("X-Api-Key", test.key)
			}
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if test.want == 0 {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("got %d, want the handshake to fail", resp.StatusCode)
				}
				return
			}
			if err != nil {
				t.Fatalf("got %v, want %d", err, test.want)
			}
			resp.Body.Close()
			if test.want == http.StatusOK {
				test.want = http.StatusNotFound // an unknown account, past auth
			}
			if resp.StatusCode != test.want {
				t.Errorf("got %d, want %d", resp.StatusCode, test.want)
			}
		})
	}
}

// probeBuild builds, once per test run, the grpc_health_probe the image
// ships (pinned in tools/go.mod).
var probeBuild = sync.OnceValues(func() (string, error) {
	// In binDir, removed after the last test.
	bin := filepath.Join(binDir, "grpc_health_probe")
	cmd := exec.Command("go", "build", "-modfile=tools/go.mod", "-o", bin, "github.com/grpc-ecosystem/grpc-health-probe")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build grpc_health_probe: %v: %s", err, out)
	}
	return bin, nil
})

func healthProbe(t *testing.T) string {
	t.Helper()
	bin, err := probeBuild()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}
