// Package ssrftest gives tests a resolver whose answers they choose, so that
// a test of names (at registration or at dial time) asks no real DNS server
// anything. The Go resolver still reads /etc/hosts first, so localhost
// resolves from there as it does in production.
package ssrftest

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"

	"golang.org/x/net/dns/dnsmessage"
)

// Resolver returns a resolver that answers from hosts, by name (without the
// trailing dot, in any case): an A record for each IPv4 address of the name,
// an AAAA record for each IPv6 address (IPv4-mapped ones included, as some
// servers answer them), and NXDOMAIN for a name hosts does not have. The DNS
// server it asks runs in the process, over an in-memory connection.
func Resolver(hosts map[string][]netip.Addr) *net.Resolver {
	byName := make(map[string][]netip.Addr, len(hosts))
	for name, addrs := range hosts {
		byName[strings.ToLower(strings.TrimSuffix(name, "."))+"."] = addrs
	}
	return &net.Resolver{
		PreferGo: true,
		Dial: func(context.Context, string, string) (net.Conn, error) {
			client, server := net.Pipe()
			go serve(server, byName)
			return client, nil
		},
	}
}

// serve answers the queries on c, framed as over TCP (a two-byte length
// before each message: net.Pipe is not a PacketConn), until c is closed.
func serve(c net.Conn, hosts map[string][]netip.Addr) {
	defer c.Close()
	for {
		var n uint16
		if err := binary.Read(c, binary.BigEndian, &n); err != nil {
			return
		}
		query := make([]byte, n)
		if _, err := io.ReadFull(c, query); err != nil {
			return
		}
		answer, err := respond(query, hosts)
		if err != nil {
			return
		}
		if _, err := c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(answer)))); err != nil {
			return
		}
		if _, err := c.Write(answer); err != nil {
			return
		}
	}
}

// respond builds the answer to one query.
func respond(query []byte, hosts map[string][]netip.Addr) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	addrs, known := hosts[strings.ToLower(q.Name.String())]
	rcode := dnsmessage.RCodeSuccess
	if !known {
		rcode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{
		ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired,
		RecursionAvailable: true, RCode: rcode,
	})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}
	for _, a := range addrs {
		switch {
		case q.Type == dnsmessage.TypeA && a.Is4():
			err = b.AResource(rh, dnsmessage.AResource{A: a.As4()})
		case q.Type == dnsmessage.TypeAAAA && a.Is6():
			err = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
		if err != nil {
			return nil, err
		}
	}
	return b.Finish()
}
