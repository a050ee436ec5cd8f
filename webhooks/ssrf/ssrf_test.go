package ssrf_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/shebasvc/sheba/webhooks/ssrf"
	"github.com/shebasvc/sheba/webhooks/ssrf/ssrftest"
)

// addresses are the rules of docs/webhooks.md#private-networks, range by
// range: an address at each end of a refused range and one just outside
// it. Just outside a refused IPv6 range that lies outside 2000::/3 is
// refused too, by the 2000::/3 rule.
var addresses = []struct {
	ip     string
	public bool
}{
	{"0.0.0.0", false}, {"0.255.255.255", false}, {"1.0.0.0", true},
	{"10.0.0.0", false}, {"10.255.255.255", false}, {"9.255.255.255", true}, {"11.0.0.0", true},
	{"100.64.0.0", false}, {"100.127.255.255", false}, {"100.63.255.255", true}, {"100.128.0.0", true},
	{"127.0.0.1", false}, {"127.255.255.255", false}, {"126.255.255.255", true}, {"128.0.0.0", true},
	{"169.254.0.0", false}, {"169.254.169.254", false}, {"169.253.255.255", true}, {"169.255.0.0", true},
	{"172.16.0.0", false}, {"172.31.255.255", false}, {"172.15.255.255", true}, {"172.32.0.0", true},
	{"192.0.0.0", false}, {"192.0.0.255", false}, {"191.255.255.255", true}, {"192.0.1.0", true},
	{"192.0.2.0", false}, {"192.0.2.255", false}, {"192.0.3.0", true},
	{"192.88.99.0", false}, {"192.88.99.255", false}, {"192.88.98.255", true}, {"192.88.100.0", true},
	{"192.168.0.0", false}, {"192.168.255.255", false}, {"192.167.255.255", true}, {"192.169.0.0", true},
	{"198.18.0.0", false}, {"198.19.255.255", false}, {"198.17.255.255", true}, {"198.20.0.0", true},
	{"198.51.100.0", false}, {"198.51.100.255", false}, {"198.51.99.255", true}, {"198.51.101.0", true},
	{"203.0.113.0", false}, {"203.0.113.255", false}, {"203.0.112.255", true}, {"203.0.114.0", true},
	{"224.0.0.0", false}, {"239.255.255.255", false}, {"223.255.255.255", true},
	{"240.0.0.0", false}, {"255.255.255.255", false},
	{"168.63.129.16", false}, {"168.63.129.15", true}, {"168.63.129.17", true}, // Azure's metadata and DNS
	{"8.8.8.8", true}, {"93.184.215.14", true},

	{"2000::", true}, {"3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true},
	{"1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false}, {"4000::", false},
	{"2001::", false}, {"2001:0:ffff:ffff:ffff:ffff:ffff:ffff", false}, // Teredo
	{"2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true}, {"2001:1::", true},
	{"2001:db8::", false}, {"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", false}, // documentation
	{"2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", true}, {"2001:db9::", true},
	{"2002::", false}, {"2002:7f00:1::", false}, {"2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false}, // 6to4
	{"2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true}, {"2003::", true},
	{"64:ff9b::", false}, {"64:ff9b::a00:1", false}, {"64:ff9b::808:808", false}, {"64:ff9b::1:0:0", false}, // NAT64
	{"64:ff9b:1::", false}, {"64:ff9b:1::a00:1", false}, {"64:ff9b:1:ffff:ffff:ffff:ffff:ffff", false}, {"64:ff9b:2::", false}, // local NAT64
	{"fd00:ec2::254", false}, // AWS's metadata
	{"::", false}, {"::1", false}, {"fe80::1", false}, {"fc00::1", false}, {"fd00::1", false},
	{"ff02::1", false}, {"ff0e::1", false},
	{"2606:4700:4700::1111", true}, {"2a00:1450:4001::1", true},

	// IPv4-mapped and IPv4-compatible: judged as their IPv4.
	{"::ffff:127.0.0.1", false}, {"::ffff:10.0.0.1", false}, {"::ffff:168.63.129.16", false}, {"::ffff:8.8.8.8", true},
	{"::127.0.0.1", false}, {"::10.0.0.1", false}, {"::169.254.169.254", false}, {"::8.8.8.8", true},

	// A zone makes any address local to a link.
	{"fe80::1%eth0", false}, {"2606:4700:4700::1111%eth0", false},
}

func TestPublic(t *testing.T) {
	for _, test := range addresses {
		if got := ssrf.Public(netip.MustParseAddr(test.ip)); got != test.public {
			t.Errorf("Public(%s): got %v, want %v", test.ip, got, test.public)
		}
	}
}

// ports are the port rules, on a public address: 80, 443 and 1024-65535,
// written or implied by the scheme.
var ports = []struct {
	url     string
	allowed bool
}{
	{"http://93.184.215.14/hook", true},
	{"https://93.184.215.14/hook", true},
	{"http://93.184.215.14:80/hook", true},
	{"https://93.184.215.14:80/hook", true},
	{"http://93.184.215.14:443/hook", true},
	{"http://93.184.215.14:1024/hook", true},
	{"http://93.184.215.14:8080/hook", true},
	{"http://93.184.215.14:65535/hook", true},
	{"http://8.8.8.8:25/", false},
	{"http://93.184.215.14:0/hook", false},
	{"http://93.184.215.14:22/hook", false},
	{"http://93.184.215.14:79/hook", false},
	{"http://93.184.215.14:81/hook", false},
	{"https://93.184.215.14:442/hook", false},
	{"https://93.184.215.14:444/hook", false},
	{"http://93.184.215.14:1023/hook", false},
	{"http://93.184.215.14:65536/hook", false},
	{"http://[2606:4700:4700::1111]:25/hook", false},
}

// wantNoAddress fails the test if msg names any form of addrs.
func wantNoAddress(t *testing.T, what, msg string, addrs ...netip.Addr) {
	t.Helper()
	for _, a := range addrs {
		for _, form := range []string{a.String(), a.Unmap().String(), a.WithZone("").String()} {
			if strings.Contains(msg, form) {
				t.Errorf("%s: the error %q names the address %s", what, msg, form)
				break
			}
		}
	}
}

// checkURL checks raw as registration does: ParseURL, then, unless
// allowPrivate, CheckTarget. It fails the test if a refusal of the
// target does not wrap ErrNotAllowed.
func checkURL(t *testing.T, raw string, allowPrivate bool, resolver *net.Resolver) error {
	t.Helper()
	u, err := ssrf.ParseURL(raw)
	if err != nil || allowPrivate {
		return err
	}
	err = ssrf.CheckTarget(context.Background(), u, resolver)
	if err != nil && !errors.Is(err, ssrf.ErrNotAllowed) {
		t.Errorf("CheckTarget(%s): got %v, want an error wrapping ErrNotAllowed", raw, err)
	}
	return err
}

func TestCheckURLAddresses(t *testing.T) {
	for _, test := range addresses {
		ip := netip.MustParseAddr(test.ip)
		host := ip.String()
		if ip.Is6() {
			host = "[" + strings.ReplaceAll(host, "%", "%25") + "]"
		}
		url := "https://" + host + "/hook"
		err := checkURL(t, url, false, ssrftest.Resolver(nil))
		if (err == nil) != test.public {
			t.Errorf("CheckURL(%s): got error %v, want allowed: %v", url, err, test.public)
		}
		if err != nil {
			wantNoAddress(t, url, err.Error(), ip)
		}
		// allow_private_networks lifts the address rules.
		if err := checkURL(t, url, true, ssrftest.Resolver(nil)); err != nil {
			t.Errorf("CheckURL(%s) allowing private networks: got %v, want allowed", url, err)
		}
	}
}

func TestCheckURLPorts(t *testing.T) {
	for _, test := range ports {
		err := checkURL(t, test.url, false, ssrftest.Resolver(nil))
		if (err == nil) != test.allowed {
			t.Errorf("CheckURL(%s): got error %v, want allowed: %v", test.url, err, test.allowed)
		}
		// allow_private_networks lifts the port rules.
		if err := checkURL(t, test.url, true, ssrftest.Resolver(nil)); err != nil {
			t.Errorf("CheckURL(%s) allowing private networks: got %v, want allowed", test.url, err)
		}
	}
}

// TestCheckURLNames resolves names with a resolver of the test's: every
// address a name resolves to must be public, and a refusal names none of
// them (it would tell the caller what the service's DNS knows).
func TestCheckURLNames(t *testing.T) {
	hosts := map[string][]netip.Addr{
		"public.test":     {netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("2606:4700:4700::1111")},
		"loopback.test":   {netip.MustParseAddr("127.0.0.1")},
		"mapped.test":     {netip.MustParseAddr("::ffff:127.0.0.1")},
		"compatible.test": {netip.MustParseAddr("::127.0.0.1")},
		"mixed.test":      {netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("10.0.0.1")},
		"sixtofour.test":  {netip.MustParseAddr("2002:7f00:1::")},
		"nat64.test":      {netip.MustParseAddr("64:ff9b:1::a00:1")},
		"metadata.test":   {netip.MustParseAddr("fd00:ec2::254")},
		"azure.test":      {netip.MustParseAddr("168.63.129.16")},
	}
	resolver := ssrftest.Resolver(hosts)
	for _, test := range []struct {
		url     string
		allowed bool
	}{
		{"https://public.test/hook", true},
		{"http://PUBLIC.test:8080/hook", true},
		{"http://public.test:25/hook", false},
		{"https://loopback.test/hook", false},
		{"https://mapped.test/hook", false},
		{"https://compatible.test/hook", false},
		{"https://mixed.test/hook", false},
		{"https://sixtofour.test/hook", false},
		{"https://nat64.test/hook", false},
		{"https://metadata.test/hook", false},
		{"https://azure.test/hook", false},
		{"https://missing.test/hook", false},
	} {
		err := checkURL(t, test.url, false, resolver)
		if (err == nil) != test.allowed {
			t.Errorf("CheckURL(%s): got error %v, want allowed: %v", test.url, err, test.allowed)
		}
		if err != nil {
			for _, addrs := range hosts {
				wantNoAddress(t, test.url, err.Error(), addrs...)
			}
		}
	}
}

// TestCheckTargetCanceled: a lookup cut short by the caller's context is
// the context's error, not a refusal.
func TestCheckTargetCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	u, err := ssrf.ParseURL("https://public.test/hook")
	if err != nil {
		t.Fatal(err)
	}
	resolver := ssrftest.Resolver(map[string][]netip.Addr{"public.test": {netip.MustParseAddr("93.184.215.14")}})
	if err := ssrf.CheckTarget(ctx, u, resolver); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}

// TestCheckURLSyntax checks the rules that hold whatever the network.
func TestCheckURLSyntax(t *testing.T) {
	for _, test := range []struct {
		url          string
		allowPrivate bool
		wantErr      bool
	}{
		{url: "https://93.184.215.14/hook"},
		{url: "ftp://93.184.215.14/hook", wantErr: true},
		{url: "javascript:alert(1)", wantErr: true},
		{url: "/relative", wantErr: true},
		{url: "https://", wantErr: true},
		{url: "https://:443/", wantErr: true},
		{url: "https://user:pw@93.184.215.14/", wantErr: true},
		{url: "https://93.184.215.14/#frag", wantErr: true},
		{url: "http://127.0.0.1:9000/hook", allowPrivate: true},
		{url: "ftp://127.0.0.1/", allowPrivate: true, wantErr: true},
	} {
		err := checkURL(t, test.url, test.allowPrivate, ssrftest.Resolver(nil))
		if (err != nil) != test.wantErr {
			t.Errorf("CheckURL(%q, allowPrivate=%v): got error %v, want error: %v", test.url, test.allowPrivate, err, test.wantErr)
		}
	}
}

// TestControl checks the dial-time rules on every address and port of the
// tables above, without dialing: Control sees the address after DNS.
func TestControl(t *testing.T) {
	for _, test := range addresses {
		address := netip.AddrPortFrom(netip.MustParseAddr(test.ip), 443).String()
		err := ssrf.Control("tcp", address, nil)
		if (err == nil) != test.public || err != nil && !errors.Is(err, ssrf.ErrNotAllowed) {
			t.Errorf("Control(%s): got error %v, want allowed: %v", address, err, test.public)
		}
		if err != nil {
			wantNoAddress(t, address, err.Error(), netip.MustParseAddr(test.ip))
		}
	}
	for _, port := range []struct {
		port    string
		allowed bool
	}{
		{"80", true}, {"443", true}, {"1024", true}, {"65535", true},
		{"0", false}, {"25", false}, {"79", false}, {"81", false}, {"442", false}, {"444", false}, {"1023", false},
	} {
		address := net.JoinHostPort("93.184.215.14", port.port)
		if err := ssrf.Control("tcp", address, nil); (err == nil) != port.allowed {
			t.Errorf("Control(%s): got error %v, want allowed: %v", address, err, port.allowed)
		}
	}
}

// TestControlRefusesLoopbackAtDial proves the dial-time check on a real
// dialer: a listener on 127.0.0.1 is there, and the dialer with Control
// refuses it, by address and by a name that resolves to it after it was
// registered (DNS rebinding). The listener accepts nothing.
func TestControlRefusesLoopbackAtDial(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	_, port, _ := net.SplitHostPort(lis.Addr().String())
	d := net.Dialer{
		Timeout:  5 * time.Second,
		Control:  ssrf.Control,
		Resolver: ssrftest.Resolver(map[string][]netip.Addr{"rebind.test": {netip.MustParseAddr("127.0.0.1")}}),
	}
	for _, address := range []string{lis.Addr().String(), "rebind.test:" + port} {
		conn, err := d.DialContext(context.Background(), "tcp", address)
		if err == nil {
			conn.Close()
			t.Fatalf("got a connection to %s, want it refused", address)
		}
		if !errors.Is(err, ssrf.ErrNotAllowed) {
			t.Errorf("dial %s: got error %v, want one wrapping ssrf.ErrNotAllowed", address, err)
		}
	}
	// A connection that got through would wait in the backlog.
	lis.(*net.TCPListener).SetDeadline(time.Now().Add(50 * time.Millisecond))
	if conn, err := lis.Accept(); err == nil {
		conn.Close()
		t.Error("the listener accepted a connection, want none")
	}
}
