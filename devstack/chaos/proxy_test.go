package chaos

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// The proxy forwards both ways; black-holed, it forwards nothing and
// closes nothing; resumed, what was held back arrives in order.
func TestProxyBlackHole(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	echoed := make(chan struct{})
	go func() {
		defer close(echoed)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c)
	}()
	p, err := NewProxy(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	line := func(want string) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := r.ReadString('\n')
		if err != nil || got != want {
			t.Fatalf("read %q, %v; want %q", got, err, want)
		}
	}
	if _, err := c.Write([]byte("one\n")); err != nil {
		t.Fatal(err)
	}
	line("one\n")

	p.Block()
	if _, err := c.Write([]byte("two\n")); err != nil {
		t.Fatal(err)
	}
	// Nothing comes back while black-holed, and the connection stays open.
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if b, err := r.ReadByte(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("black-holed: read %q, %v; want a timeout", b, err)
	}
	p.Resume()
	line("two\n")
	if _, err := c.Write([]byte("three\n")); err != nil {
		t.Fatal(err)
	}
	line("three\n")

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.ReadByte(); err == nil {
		t.Fatal("read after Close: want an error")
	}
	_ = c.Close()
	<-echoed
}
