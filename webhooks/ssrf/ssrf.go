// Package ssrf keeps webhook deliveries away from the networks of the
// machine that sends them: loopback, private (RFC 1918, RFC 4193),
// link-local (cloud metadata services live there), and the other ranges no
// public receiver uses. A URL is checked when an endpoint is registered, and
// the address is checked again when the connection is dialed, after DNS, so
// a name that later resolves to a private address (DNS rebinding) is
// refused too.
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
	"syscall"
)

// ErrPrivate is returned for a target on a loopback, private, link-local or
// otherwise non-public network.
var ErrPrivate = errors.New("target is on a loopback, private or link-local network")

// Public reports whether ip is an address a public receiver may have.
func Public(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsValid() && ip.IsGlobalUnicast() && !ip.IsPrivate() &&
		!ip.IsLoopback() && !ip.IsLinkLocalUnicast() && !ip.IsUnspecified() && !sharedOrReserved(ip)
}

// nonPublic are ranges IsGlobalUnicast and IsPrivate leave in that no
// receiver on the internet has.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("100.64.0.0/10"), // carrier-grade NAT (RFC 6598)
	netip.MustParsePrefix("192.0.0.0/24"),  // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"), // benchmarking (RFC 2544)
	netip.MustParsePrefix("240.0.0.0/4"),   // reserved
	netip.MustParsePrefix("64:ff9b::/96"),  // NAT64, which can reach IPv4 private space
	netip.MustParsePrefix("2001:db8::/32"), // documentation
}

func sharedOrReserved(ip netip.Addr) bool {
	for _, p := range nonPublic {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Control is a net.Dialer Control function that refuses to connect to a
// non-public address. It runs after DNS, on the address about to be dialed.
func Control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dial %s: %w", address, err)
	}
	if !Public(ap.Addr()) {
		return fmt.Errorf("dial %s: %w", address, ErrPrivate)
	}
	return nil
}

// CheckURL checks that raw is an absolute http or https URL with a host and
// no user information, and, unless allowPrivate, that every address its host
// resolves to (with resolver, net.DefaultResolver if nil) is public. The
// error says what is wrong in words fit for the caller.
func CheckURL(ctx context.Context, raw string, allowPrivate bool, resolver *net.Resolver) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("must be an absolute http or https URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errors.New("scheme must be http or https")
	}
	if u.Host == "" || u.Hostname() == "" {
		return errors.New("must have a host")
	}
	if u.User != nil {
		return errors.New("must not carry a user or password")
	}
	if u.Fragment != "" {
		return errors.New("must not have a fragment")
	}
	if allowPrivate {
		return nil
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if !Public(ip) {
			return ErrPrivate
		}
		return nil
	}
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	addrs, err := resolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return fmt.Errorf("host %q does not resolve", host)
	}
	for _, ip := range addrs {
		if !Public(ip) {
			return fmt.Errorf("host %q resolves to %s: %w", host, ip, ErrPrivate)
		}
	}
	return nil
}
