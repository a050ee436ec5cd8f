// Package peertest checks a peer the way the bench calls it: sheba's REST
// ping and gRPC ping, over real listeners on 127.0.0.1 and real clients,
// and its metrics endpoint counting them.
package peertest

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// Addr is a free address on 127.0.0.1.
func Addr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Serve runs serve in the background until the test ends; serve returns
// once its context is done.
func Serve(t *testing.T, serve func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("serve did not return 10 s after its context was done")
		}
	})
}

// Ping checks that GET httpURL/v1/ping answers 200 with sheba's JSON,
// {"message":"pong"}, that sheba.v1.PingService/Ping on grpcAddr answers
// "pong", and then that GET metricsURL has every one of metrics (the
// metrics of the calls just made).
func Ping(t *testing.T, httpURL, grpcAddr, metricsURL string, metrics ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	var resp *http.Response
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, httpURL+"/v1/ping", nil)
		var err error
		if resp, err = http.DefaultClient.Do(req); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("GET /v1/ping: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || json.Unmarshal(body, &got) != nil ||
		len(got) != 1 || got["message"] != "pong" {
		t.Errorf("GET /v1/ping: %s, Content-Type %q, %s; want 200, application/json, {\"message\":\"pong\"}", resp.Status, resp.Header.Get("Content-Type"), body)
	}

	cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	pong, err := shebav1.NewPingServiceClient(cc).Ping(ctx, &shebav1.PingRequest{})
	if err != nil || pong.GetMessage() != "pong" {
		t.Errorf("PingService/Ping: %v, %v; want pong", pong, err)
	}

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", metricsURL, err)
	}
	body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range metrics {
		if !strings.Contains(string(body), m) {
			t.Errorf("GET %s: no %s in\n%s", metricsURL, m, body)
		}
	}
}
