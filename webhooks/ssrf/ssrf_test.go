package ssrf_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/shebasvc/sheba/webhooks/ssrf"
)

func TestPublic(t *testing.T) {
	for _, test := range []struct {
		ip   string
		want bool
	}{
		{"93.184.215.14", true},
		{"2606:2800:21f:cb07:6820:80da:af6b:8b2c", true},
		{"127.0.0.1", false},
		{"::1", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"192.168.1.1", false},
		{"169.254.169.254", false}, // cloud metadata
		{"fe80::1", false},
		{"fd00::1", false},
		{"0.0.0.0", false},
		{"100.64.0.1", false},
		{"::ffff:127.0.0.1", false},
		{"::ffff:10.0.0.1", false},
		{"224.0.0.1", false}, // multicast
	} {
		if got := ssrf.Public(netip.MustParseAddr(test.ip)); got != test.want {
			t.Errorf("Public(%s): got %v, want %v", test.ip, got, test.want)
		}
	}
}

func TestCheckURL(t *testing.T) {
	ctx := context.Background()
	for _, test := range []struct {
		url          string
		allowPrivate bool
		wantErr      bool
	}{
		{url: "https://93.184.215.14/hook"},
		{url: "http://93.184.215.14:8080/hook"},
		{url: "ftp://93.184.215.14/hook", wantErr: true},
		{url: "javascript:alert(1)", wantErr: true},
		{url: "/relative", wantErr: true},
		{url: "https://", wantErr: true},
		{url: "https://user:pw@93.184.215.14/", wantErr: true},
		{url: "https://93.184.215.14/#frag", wantErr: true},
		{url: "http://127.0.0.1:9000/hook", wantErr: true},
		{url: "http://[::1]:9000/hook", wantErr: true},
		{url: "http://169.254.169.254/latest/meta-data", wantErr: true},
		{url: "http://localhost:9000/hook", wantErr: true},
		{url: "http://127.0.0.1:9000/hook", allowPrivate: true},
		{url: "http://localhost:9000/hook", allowPrivate: true},
		{url: "ftp://127.0.0.1/", allowPrivate: true, wantErr: true},
	} {
		err := ssrf.CheckURL(ctx, test.url, test.allowPrivate, nil)
		if (err != nil) != test.wantErr {
			t.Errorf("CheckURL(%q, allowPrivate=%v): got error %v, want error: %v", test.url, test.allowPrivate, err, test.wantErr)
		}
	}
}

// TestControlRefusesLoopbackAtDial proves the dial-time check: a listener on
// 127.0.0.1 is there, and the dialer with Control still refuses it.
func TestControlRefusesLoopbackAtDial(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	d := net.Dialer{Timeout: time.Second, Control: ssrf.Control}
	conn, err := d.DialContext(context.Background(), "tcp", lis.Addr().String())
	if err == nil {
		conn.Close()
		t.Fatal("got a connection to 127.0.0.1, want it refused")
	}
	if !errors.Is(err, ssrf.ErrPrivate) {
		t.Errorf("got error %v, want one wrapping ssrf.ErrPrivate", err)
	}
	// By name too: localhost resolves first, then each address is refused.
	_, port, _ := net.SplitHostPort(lis.Addr().String())
	if conn, err := d.DialContext(context.Background(), "tcp", "localhost:"+port); err == nil {
		conn.Close()
		t.Error("got a connection to localhost, want it refused")
	}
}
