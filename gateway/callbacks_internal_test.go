package gateway

import (
	"strings"
	"testing"
)

// The address check also runs when a callback connects, after name
// resolution: a name that resolves to loopback or link-local is refused.
func TestCallbackDialControl(t *testing.T) {
	t.Parallel()
	strict := &callbacks{cfg: CallbackConfig{}}
	dev := &callbacks{cfg: CallbackConfig{AllowLoopback: true}}
	for _, c := range []struct {
		addr        string
		strict, dev bool // allowed
	}{
		{"127.0.0.1:80", false, true},
		{"[::1]:443", false, true},
		{"169.254.169.254:80", false, false},
		{"[fe80::1]:80", false, false},
		{"0.0.0.0:80", false, false},
		{"224.0.0.1:80", false, false},
		{"10.1.2.3:443", true, true},
		{"93.184.216.34:443", true, true},
	} {
		if err := strict.dialControl("tcp", c.addr, nil); (err == nil) != c.strict {
			t.Errorf("strict %s: %v", c.addr, err)
		}
		if err := dev.dialControl("tcp", c.addr, nil); (err == nil) != c.dev {
			t.Errorf("dev %s: %v", c.addr, err)
		}
	}
	if err := strict.checkURL("https://hooks.example.com/foundryq"); err != nil {
		t.Errorf("a public URL: %v", err)
	}
	if err := strict.checkURL("http://" + strings.Repeat("a", 2050)); err == nil {
		t.Error("a 2 KB URL was accepted")
	}
}
