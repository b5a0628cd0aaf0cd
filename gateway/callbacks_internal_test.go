package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// stubNet is a resolver and a dialer that never touch the network: names
// resolve from a table, and every dial is recorded and fails.
type stubNet struct {
	names map[string][]netip.Addr
	mu    sync.Mutex
	dials []string
}

var errStubDial = errors.New("stub dialer: not connected")

func (s *stubNet) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := s.names[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (s *stubNet) dial(_ context.Context, _, addr string) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dials = append(s.dials, addr)
	return nil, errStubDial
}

func (s *stubNet) dialed() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.dials...)
}

// stubCallbacks is a tenant's callbacks on a stub network.
func stubCallbacks(cfg CallbackConfig, names map[string][]netip.Addr) (*callbacks, *stubNet) {
	sn := &stubNet{names: names}
	c := newCallbacks(cfg.withDefaults(), &tenant{cfg: Tenant{Name: "acme", Prefix: "foundryq"}}, zerolog.Nop())
	c.resolver = sn
	c.dialAddr = sn.dial
	return c, sn
}

// Every address form a callback must not reach, refused at submit (the
// URL), when a name resolves to it (DNS rebinding), and by the socket's
// last check; each allowed again when the operator lists its range.
// Nothing here connects anywhere: the dialer is a stub.
func TestCallbackAddressesRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ addr, allow string }{
		{"10.0.0.1", "10.0.0.0/8"},
		{"172.16.0.1", "172.16.0.0/12"},
		{"192.168.1.1", "192.168.0.0/16"},
		{"100.64.0.1", "100.64.0.0/10"},
		{"100.100.100.200", "100.100.100.200/32"},
		{"168.63.129.16", "168.63.129.16/32"},
		{"169.254.169.254", "169.254.169.254/32"},
		{"127.0.0.1", "127.0.0.0/8"},
		{"0.0.0.0", "0.0.0.0/8"},
		{"224.0.0.1", "224.0.0.0/4"},
		{"255.255.255.255", "240.0.0.0/4"},
		{"192.0.0.192", "192.0.0.0/24"},
		{"::1", "::1/128"},
		{"fe80::1", "fe80::/10"},
		{"fc00::1", "fc00::/7"},
		{"fd00:ec2::254", "fd00:ec2::254/128"},
		{"64:ff9b::a9fe:a9fe", "64:ff9b::/96"},                // NAT64 of 169.254.169.254
		{"64:ff9b::a00:1", "10.0.0.0/8"},                      // NAT64 of 10.0.0.1: its IPv4 range allows it
		{"64:ff9b:1::a00:1", "64:ff9b:1::/48"},                // local-use NAT64
		{"::ffff:10.0.0.1", "10.0.0.0/8"},                     // IPv4-mapped
		{"::ffff:a9fe:a9fe", "169.254.0.0/16"},                // IPv4-mapped, hex
		{"::a9fe:a9fe", "169.254.0.0/16"},                     // IPv4-compatible
		{"::ffff:0:a9fe:a9fe", "169.254.0.0/16"},              // IPv4-translated (SIIT) of 169.254.169.254
		{"::ffff:0:a00:1", "10.0.0.0/8"},                      // IPv4-translated of 10.0.0.1
		{"2002:a9fe:a9fe::1", "2002::/16"},                    // 6to4 of 169.254.169.254
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001::/32"}, // Teredo
	} {
		t.Run(c.addr, func(t *testing.T) {
			t.Parallel()
			a := netip.MustParseAddr(c.addr)
			host := a.String()
			if a.Is6() {
				host = "[" + host + "]"
			}
			strict, sn := stubCallbacks(CallbackConfig{}, map[string][]netip.Addr{"rebind.example.com": {a}})
			if err := strict.checkURL("https://" + host + "/cb"); err == nil {
				t.Errorf("submit: %s accepted", c.addr)
			}
			if err := strict.dialControl("tcp", net.JoinHostPort(c.addr, "443"), nil); !errors.Is(err, errAddrRefused) {
				t.Errorf("socket check: %v", err)
			}
			// A name that passes at submit and resolves to the address when
			// the callback connects.
			if err := strict.checkURL("https://rebind.example.com/cb"); err != nil {
				t.Fatalf("a DNS name at submit: %v", err)
			}
			if _, err := strict.dial(context.Background(), "tcp", "rebind.example.com:443"); !errors.Is(err, errAddrRefused) {
				t.Errorf("dial by name: %v", err)
			}
			if _, err := strict.dial(context.Background(), "tcp", net.JoinHostPort(c.addr, "443")); !errors.Is(err, errAddrRefused) {
				t.Errorf("dial by address: %v", err)
			}
			if d := sn.dialed(); len(d) != 0 {
				t.Fatalf("dialled %v", d)
			}

			open, sn2 := stubCallbacks(CallbackConfig{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix(c.allow)}},
				map[string][]netip.Addr{"rebind.example.com": {a}})
			if err := open.checkURL("https://" + host + "/cb"); err != nil {
				t.Errorf("allowed by %s, refused at submit: %v", c.allow, err)
			}
			if _, err := open.dial(context.Background(), "tcp", "rebind.example.com:443"); !errors.Is(err, errStubDial) {
				t.Errorf("allowed by %s, dial: %v", c.allow, err)
			}
			if err := open.dialControl("tcp", net.JoinHostPort(c.addr, "443"), nil); err != nil {
				t.Errorf("allowed by %s, socket check: %v", c.allow, err)
			}
			if d := sn2.dialed(); len(d) != 1 || d[0] != net.JoinHostPort(a.String(), "443") {
				t.Errorf("allowed: dialled %v", d)
			}
		})
	}
}

// Public addresses pass, in every form; a name that answers a public and
// a private address is refused whole.
func TestCallbackAddressesAllowed(t *testing.T) {
	t.Parallel()
	pub, priv := netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("10.0.0.1")
	c, sn := stubCallbacks(CallbackConfig{}, map[string][]netip.Addr{
		"hooks.example.com": {pub}, "mixed.example.com": {pub, priv},
	})
	for _, u := range []string{
		"https://hooks.example.com/foundryq", "https://93.184.216.34/cb", "https://[2606:2800:220:1:248:1893:25c8:1946]/cb",
		"https://[64:ff9b::5db8:d822]/cb", // NAT64 of a public address
	} {
		if err := c.checkURL(u); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
	if _, err := c.dial(context.Background(), "tcp", "hooks.example.com:443"); !errors.Is(err, errStubDial) {
		t.Errorf("public name: %v", err)
	}
	if _, err := c.dial(context.Background(), "tcp", "mixed.example.com:443"); !errors.Is(err, errAddrRefused) {
		t.Errorf("a name with a private address among public ones: %v", err)
	}
	if d := sn.dialed(); len(d) != 1 || d[0] != "93.184.216.34:443" {
		t.Errorf("dialled %v", d)
	}
	for _, u := range []string{
		"http://" + strings.Repeat("a", 2050), "http://2130706433/", "http://0x7f.1/", "http://127.1/",
		"http://[fe80::1%25eth0]/", "http://localhost/", "http://a.localhost./", "ftp://example.com/",
	} {
		if err := c.checkURL(u); err == nil {
			t.Errorf("%s accepted", u)
		}
	}
}

// The HTTP client of the callbacks goes through the checks: a POST to a
// name that resolves inward never dials.
func TestCallbackClientRefusesRebinding(t *testing.T) {
	t.Parallel()
	c, sn := stubCallbacks(CallbackConfig{}, map[string][]netip.Addr{"rebind.example.com": {netip.MustParseAddr("169.254.169.254")}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://rebind.example.com/latest/meta-data", nil)
	_, err := c.http.Do(req)
	if !errors.Is(err, errAddrRefused) {
		t.Fatalf("POST: %v", err)
	}
	if d := sn.dialed(); len(d) != 0 {
		t.Fatalf("dialled %v", d)
	}
}

// Each tenant's callbacks are signed with its own keys: the delivery the
// gateway makes for tenant A (of a run id B also has) does not pass B's
// verifier, B's own passes it, and during a rotation every active key
// signs. The gateway-wide secret signs the first version only while it
// is set.
func TestCallbackSignedPerTenant(t *testing.T) {
	t.Parallel()
	keyA, keyB, keyB2 := []byte("tenant-a-key-0123456789"), []byte("tenant-b-key-0123456789"), []byte("tenant-b-next-key-01234")
	mk := func(name string, keys ...[]byte) *callbacks {
		return newCallbacks(CallbackConfig{}.withDefaults(), &tenant{cfg: Tenant{Name: name, Prefix: "foundryq"}, cbKeys: keys}, zerolog.Nop())
	}
	a, b := mk("a", keyA), mk("b", keyB, keyB2)
	const url = "https://hooks.example.com/foundryq"
	d := Delivery{RunID: "run_1", URL: url, Seq: 9, Event: []byte(`{"run_id":"run_1","seq":9,"type":"run.completed"}`)}
	now := time.Now()
	verifyB := Verifier{Tenant: "b", URL: url, Keys: [][]byte{keyB}}
	ha, hb := http.Header{}, http.Header{}
	a.sign(ha, d, 1, now)
	b.sign(hb, d, 1, now)
	if err := verifyB.Verify(ha, d.Event, now); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("A's delivery at B's receiver: %v", err)
	}
	if err := verifyB.Verify(hb, d.Event, now); err != nil {
		t.Fatalf("B's delivery: %v", err)
	}
	if err := (Verifier{Tenant: "b", URL: url, Keys: [][]byte{keyB2}}).Verify(hb, d.Event, now); err != nil {
		t.Fatalf("B's delivery, next key: %v", err)
	}
	if hb.Get(HeaderSignature) != "" || hb.Get(HeaderTenant) != "b" || strings.Count(hb.Get(HeaderSignatureV2), "v2=") != 2 {
		t.Fatalf("headers without a gateway-wide secret: %v", hb)
	}
	// A replay of B's genuine delivery under a new delivery id fails.
	hb.Set(HeaderDeliveryID, "run_1:10")
	if err := verifyB.Verify(hb, d.Event, now); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("replay with a new delivery id: %v", err)
	}
	// With the gateway-wide secret too (the migration), both versions.
	legacy := newCallbacks(CallbackConfig{Secret: []byte("gateway-wide-secret-0123")}.withDefaults(), &tenant{cfg: Tenant{Name: "b"}, cbKeys: [][]byte{keyB}}, zerolog.Nop())
	h := http.Header{}
	legacy.sign(h, d, 1, now)
	if err := VerifySignature([]byte("gateway-wide-secret-0123"), h, d.Event, time.Minute, now); err != nil {
		t.Fatalf("first version: %v", err)
	}
	if err := verifyB.Verify(h, d.Event, now); err != nil {
		t.Fatalf("v2 beside the first version: %v", err)
	}
}
