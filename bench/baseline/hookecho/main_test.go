package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
)

// TestHookEcho serves both protocols on every listener and checks the
// answers the bench rows rely on, and the count the driver reads.
func TestHookEcho(t *testing.T) {
	httpAddr, grpcAddr := freeAddr(t), freeAddr(t)
	sock := filepath.Join(t.TempDir(), "hook.sock")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- run(ctx, httpAddr, sock, grpcAddr, "cached") }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})

	tcp := &http.Client{Timeout: 5 * time.Second}
	unix := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	h2c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Protocols: new(http.Protocols)}}
	h2c.Transport.(*http.Transport).Protocols.SetUnencryptedHTTP2(true)
	count := func() string {
		t.Helper()
		var body string
		// The first GET may come before run has listened.
		for range 50 {
			resp, err := tcp.Get("http://" + httpAddr + "/")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				body = string(b)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		return body
	}
	if got := count(); got != "0\n" {
		t.Fatalf("count before any check: got %q, want \"0\\n\"", got)
	}

	for _, test := range []struct {
		name string
		c    *http.Client
		url  string
	}{
		{"tcp", tcp, "http://" + httpAddr + "/check"},
		{"unix", unix, "http://hook/check"},
		{"h2c", h2c, "http://" + httpAddr + "/check"},
	} {
		name := test.name
		resp, err := test.c.Post(test.url, "application/json", strings.NewReader(`{"version":1,"stage":"request"}`))
		if err != nil {
			t.Fatalf("%s: POST: %v", name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if name == "h2c" && resp.ProtoMajor != 2 {
			t.Errorf("h2c: got %s, want HTTP/2", resp.Proto)
		}
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: got %s %q, want 200 application/json", name, resp.Status, resp.Header.Get("Content-Type"))
		}
		if want := `{"control":"continue","cacheSeconds":60}`; string(b) != want {
			t.Errorf("%s: got %s, want %s", name, b, want)
		}
	}

	cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	resp, err := authv3.NewAuthorizationClient(cc).Check(ctx, &authv3.CheckRequest{})
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if got := codes.Code(resp.GetStatus().GetCode()); got != codes.OK || resp.GetOkResponse() == nil {
		t.Errorf("Check: got status %v, ok response %v; want OK with an ok response", got, resp.GetOkResponse())
	}

	if got := count(); got != "4\n" {
		t.Errorf("count after three POSTs and a Check: got %q, want \"4\\n\"", got)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
