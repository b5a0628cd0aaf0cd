package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
)

// Where a callback may go. A callback_url is a request, from anyone who
// may submit, that the gateway connect somewhere and POST: it must not
// reach what only the gateway can reach (its own loopback, the private
// network, the cloud's metadata and control endpoints). The check runs on
// the URL when the run is submitted and again on every address a
// callback connects to, after name resolution, so that a name that
// resolves elsewhere later (DNS rebinding) is refused too. An operator
// admits ranges with CallbackConfig.AllowCIDRs (--callbacks-allow-cidr).

// refusedRanges are the ranges no callback reaches unless allowed: the
// IANA special-purpose ranges that are not globally reachable
// (RFC 6890 and its registries) plus the ones cloud providers use inside.
var refusedRanges = func() []struct {
	p    netip.Prefix
	what string
} {
	var out []struct {
		p    netip.Prefix
		what string
	}
	for _, r := range [][2]string{
		{"0.0.0.0/8", "this network"},
		{"10.0.0.0/8", "private"},
		{"100.64.0.0/10", "shared address space (carrier-grade NAT, cloud internal)"},
		{"127.0.0.0/8", "loopback"},
		{"169.254.0.0/16", "link-local (cloud metadata)"},
		{"172.16.0.0/12", "private"},
		{"192.0.0.0/24", "IETF protocol assignments"},
		{"192.168.0.0/16", "private"},
		{"198.18.0.0/15", "benchmarking"},
		{"224.0.0.0/4", "multicast"},
		{"240.0.0.0/4", "reserved"},
		{"::/128", "unspecified"},
		{"::1/128", "loopback"},
		{"100::/64", "discard-only"},
		{"2001::/32", "Teredo (embeds an IPv4 address)"},
		{"64:ff9b:1::/48", "local-use NAT64"},
		{"fc00::/7", "unique-local"},
		{"fe80::/10", "link-local"},
		{"fec0::/10", "site-local"},
		{"ff00::/8", "multicast"},
		// Cloud-internal addresses outside the ranges above.
		{"168.63.129.16/32", "cloud internal (Azure WireServer)"},
		{"169.254.169.254/32", "cloud metadata"},
		{"fd00:ec2::254/128", "cloud metadata (AWS)"},
		{"100.100.100.200/32", "cloud metadata (Alibaba)"},
	} {
		out = append(out, struct {
			p    netip.Prefix
			what string
		}{netip.MustParsePrefix(r[0]), r[1]})
	}
	return out
}()

var (
	nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96")
	ipv4Translated = netip.MustParsePrefix("::ffff:0:0:0/96")
	sixToFour      = netip.MustParsePrefix("2002::/16")
	ipv4Compatible = netip.MustParsePrefix("::/96")
	loopback4      = netip.MustParsePrefix("127.0.0.0/8")
)

// errAddrRefused is the cause of every refused callback address.
var errAddrRefused = errors.New("callback address refused")

// embeddedIPv4 returns the IPv4 address an IPv6 address carries in the
// forms that route to it: IPv4-mapped (::ffff:a.b.c.d), NAT64 (64:ff9b::/96),
// IPv4-translated (::ffff:0:a.b.c.d, SIIT, RFC 2765), 6to4 (2002:AABB:CCDD::)
// and the deprecated IPv4-compatible (::a.b.c.d).
func embeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() {
		return netip.Addr{}, false
	}
	b := a.As16()
	switch {
	case a.Is4In6():
		return a.Unmap(), true
	case nat64WellKnown.Contains(a), ipv4Translated.Contains(a), ipv4Compatible.Contains(a) && a != netip.IPv6Unspecified() && a != netip.IPv6Loopback():
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	}
	return netip.Addr{}, false
}

// checkAddr refuses an address a callback must not reach, unless an
// allowed range holds it (or it is loopback and AllowLoopback is set). An
// IPv6 address that embeds an IPv4 address is judged by both.
func (c *callbacks) checkAddr(a netip.Addr) error {
	if a.Zone() != "" {
		return fmt.Errorf("%w: an address with a zone", errAddrRefused)
	}
	if err := c.checkOne(a); err != nil {
		return err
	}
	if v4, ok := embeddedIPv4(a); ok && !c.allowed(a) {
		if err := c.checkOne(v4); err != nil {
			return fmt.Errorf("%w (embedded in an IPv6 address)", err)
		}
	}
	return nil
}

func (c *callbacks) allowed(a netip.Addr) bool {
	for _, p := range c.cfg.AllowCIDRs {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func (c *callbacks) checkOne(a netip.Addr) error {
	a = a.Unmap()
	if c.allowed(a) || (c.cfg.AllowLoopback && (a.IsLoopback())) {
		return nil
	}
	for _, r := range refusedRanges {
		if r.p.Contains(a) {
			return fmt.Errorf("%w: %s range (an operator may allow it: --callbacks-allow-cidr)", errAddrRefused, r.what)
		}
	}
	return nil
}

// checkURL is the check of a callback_url at POST time: scheme, no
// credentials, and a host that is a name or an address a callback may
// reach. Names are checked again, resolved, when the callback connects.
func (c *callbacks) checkURL(raw string) error {
	if len(raw) > 2048 {
		return errors.New("longer than 2048 characters")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return errors.New("want an absolute http or https URL")
	}
	if u.User != nil {
		return errors.New("must not carry credentials (the callback is signed: check Foundryq-Signature-V2 instead)")
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return c.checkOne(netip.IPv6Loopback())
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return c.checkAddr(a)
	}
	if strings.Contains(host, "%") || strings.Contains(host, ":") {
		return errors.New("want a host name or an IP address")
	}
	// A last label of digits or hex (2130706433, 0x7f.1, 127.1) is no DNS
	// name: some resolvers read such hosts as IPv4 addresses.
	labels := strings.Split(host, ".")
	last := labels[len(labels)-1]
	if last == "" || strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		return errors.New("the host is neither a DNS name nor an IP address in its usual form")
	}
	return nil
}

// resolver looks names up; *net.Resolver is one (tests use a stub).
type resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// dial connects a callback: it resolves the host, refuses the whole name
// if any of its addresses is refused (a name that answers a public and a
// private address is not trusted with either), and connects to the
// allowed addresses in turn. c.dialAddr also checks the address it
// connects to (dialControl), in case anything between changes it.
func (c *callbacks) dial(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		if addrs, err = c.resolver.LookupNetIP(ctx, "ip", host); err != nil {
			return nil, fmt.Errorf("callback: resolve %s: %w", host, err)
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("callback: resolve %s: no address", host)
		}
	}
	for _, a := range addrs {
		if err := c.checkAddr(a); err != nil {
			return nil, fmt.Errorf("callback: %s resolves to a refused address: %w", host, err)
		}
	}
	var last error
	for _, a := range addrs {
		conn, err := c.dialAddr(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return conn, nil
		}
		last = err
	}
	return nil, last
}

// dialControl checks the address a callback's socket connects to, just
// before it connects.
func (c *callbacks) dialControl(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("callback: dial %s: not an IP address", address)
	}
	if err := c.checkAddr(ap.Addr()); err != nil {
		return fmt.Errorf("callback: dial %s: %w", address, err)
	}
	return nil
}
