// Package ssrf keeps webhook deliveries away from the networks of the
// machine that sends them: a target is allowed only when it is public
// (docs/webhooks.md#private-networks). A URL is checked when an endpoint
// is registered (ParseURL, then CheckTarget), and the address is checked
// again when the connection is dialed, after DNS (Control), so a name that
// later resolves to a private address (DNS rebinding) is refused too.
//
// No error of the package names an address a host resolved to: it would
// tell the caller what the service's DNS and network know.
//
// It imports no HTTP code, so the API handlers can use it for the first
// check.
package ssrf

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"syscall"
)

// ErrNotAllowed is the error, wrapped, of every target the rules refuse.
var ErrNotAllowed = errors.New("webhook target not allowed")

// The refusals, worded for the caller. The address one says the same for
// a literal, a name that resolves to a non-public address and a name that
// does not resolve, so that no answer tells what the service's DNS knows.
var (
	errAddress = fmt.Errorf("%w: the host must be, or resolve only to, public addresses", ErrNotAllowed)
	errPort    = fmt.Errorf("%w: the port must be 80, 443 or 1024-65535", ErrNotAllowed)
)

// refused4 are the IPv4 ranges no public receiver has: the special-purpose
// ranges of RFC 6890 and the IANA registry, and the metadata address of
// Azure (AWS's and GCP's, 169.254.169.254, is in 169.254/16).
var refused4 = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("10.0.0.0/8"),      // private
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT
	netip.MustParsePrefix("127.0.0.0/8"),     // loopback
	netip.MustParsePrefix("169.254.0.0/16"),  // link-local, cloud metadata
	netip.MustParsePrefix("172.16.0.0/12"),   // private
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("192.88.99.0/24"),  // 6to4 relay anycast
	netip.MustParsePrefix("192.168.0.0/16"),  // private
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("224.0.0.0/4"),     // multicast
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, broadcast
	netip.MustParsePrefix("168.63.129.16/32"),
}

// global6 is where public IPv6 addresses are (global unicast); refused6
// are the ranges inside it that reach elsewhere (Teredo and 6to4 tunnel to
// IPv4) or nowhere (documentation). The NAT64 prefixes and AWS's metadata
// address lie outside 2000::/3 already; they are listed because a NAT64
// prefix reaches the IPv4 networks behind the translator.
var (
	global6  = netip.MustParsePrefix("2000::/3")
	refused6 = []netip.Prefix{
		netip.MustParsePrefix("2001::/32"),      // Teredo
		netip.MustParsePrefix("2001:db8::/32"),  // documentation
		netip.MustParsePrefix("2002::/16"),      // 6to4
		netip.MustParsePrefix("64:ff9b::/96"),   // NAT64
		netip.MustParsePrefix("64:ff9b:1::/48"), // local NAT64
		netip.MustParsePrefix("fd00:ec2::254/128"),
	}
	// compatible6 holds the IPv4-compatible addresses (::a.b.c.d).
	compatible6 = netip.MustParsePrefix("::/96")
)

// Public reports whether ip is an address a public receiver may have. An
// IPv4-mapped (::ffff:a.b.c.d) or IPv4-compatible (::a.b.c.d) address is
// judged as its IPv4; an address with a zone is local to a link.
func Public(ip netip.Addr) bool {
	if !ip.IsValid() || ip.Zone() != "" {
		return false
	}
	if compatible6.Contains(ip) {
		ip = netip.AddrFrom4([4]byte(ip.AsSlice()[12:]))
	}
	ip = ip.Unmap()
	if ip.Is4() {
		return !inAny(ip, refused4)
	}
	return global6.Contains(ip) && !inAny(ip, refused6)
}

func inAny(ip netip.Addr, prefixes []netip.Prefix) bool {
	for _, p := range prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// AllowedPort reports whether a delivery may go to port: 80, 443 or
// 1024-65535. The other ports below 1024 are those of system services
// (mail, SSH, DNS), which a webhook must not be made to talk to.
func AllowedPort(port uint16) bool {
	return port == 80 || port == 443 || port >= 1024
}

// Control is a net.Dialer Control function that refuses to connect to an
// address that is not public or a port that is not allowed. It runs after
// DNS, on each address about to be dialed. Its errors wrap ErrNotAllowed
// and name no address.
func Control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return errAddress
	}
	if !Public(ap.Addr()) {
		return errAddress
	}
	if !AllowedPort(ap.Port()) {
		return errPort
	}
	return nil
}

// ParseURL parses raw, which must be an absolute http or https URL with a
// host and neither user information nor a fragment. The error says what is
// wrong in words fit for the caller.
func ParseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("must be an absolute http or https URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, errors.New("scheme must be http or https")
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, errors.New("must have a host")
	}
	if u.User != nil {
		return nil, errors.New("must not carry a user or password")
	}
	if u.Fragment != "" {
		return nil, errors.New("must not have a fragment")
	}
	return u, nil
}

// CheckTarget checks that the port of u (written, or implied by its
// scheme) is allowed and that its host is a public address or a name whose
// every address, looked up with resolver (net.DefaultResolver if nil), is
// public. u comes from ParseURL. The error wraps ErrNotAllowed, says what
// is wrong in words fit for the caller and names no address, or it is the
// error of ctx.
func CheckTarget(ctx context.Context, u *url.URL, resolver *net.Resolver) error {
	port := uint64(80)
	if u.Scheme == "https" {
		port = 443
	}
	if p := u.Port(); p != "" {
		var err error
		if port, err = strconv.ParseUint(p, 10, 16); err != nil {
			return errPort
		}
	}
	if !AllowedPort(uint16(port)) {
		return errPort
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if !Public(ip) {
			return errAddress
		}
		return nil
	}
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	addrs, err := resolver.LookupNetIP(ctx, "ip", host)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil || len(addrs) == 0 {
		return errAddress
	}
	for _, ip := range addrs {
		if !Public(ip) {
			return errAddress
		}
	}
	return nil
}
