package chaos

import (
	"errors"
	"io"
	"net"
	"sync"
)

// Proxy is a TCP proxy on loopback that can black-hole its connections: a
// worker that connects to NATS through it can be cut off from NATS without
// either side seeing a closed socket, as when a network path silently drops
// every packet. Bytes read while it is black-holed are held back (as TCP
// would retransmit them) and delivered, in order, once it resumes.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	blocked bool
	resumed chan struct{} // closed when a black hole ends; replaced by Block
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards every connection
// to target (host:port).
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, resumed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.resumed)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address (127.0.0.1:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Block black-holes the proxy: nothing more is forwarded either way, and
// no socket is closed, until Resume.
func (p *Proxy) Block() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.blocked {
		p.blocked, p.resumed = true, make(chan struct{})
	}
}

// Resume ends a black hole: what was held back goes through.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.blocked {
		p.blocked = false
		close(p.resumed)
	}
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	if p.blocked {
		p.blocked = false
		close(p.resumed)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

// gate returns the channel to wait on before forwarding: closed unless the
// proxy is black-holed.
func (p *Proxy) gate() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resumed
}

// track registers c so that Close closes it; false if the proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve forwards one connection. A black hole holds a new connection too:
// it is dialled through only once the proxy resumes.
func (p *Proxy) serve(down net.Conn) {
	defer p.wg.Done()
	if !p.track(down) {
		_ = down.Close()
		return
	}
	defer p.untrack(down)
	defer down.Close()
	<-p.gate()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return // the target is down (NATS restarting): the client sees a closed connection and reconnects
	}
	if !p.track(up) {
		_ = up.Close()
		return
	}
	defer p.untrack(up)
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { p.pipe(up, down); done <- struct{}{} }()
	go func() { p.pipe(down, up); done <- struct{}{} }()
	<-done // one side ended: end both
	_ = up.Close()
	_ = down.Close()
	<-done
}

// pipe copies src to dst, holding what it read while the proxy is
// black-holed.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if tc, ok := dst.(*net.TCPConn); ok && errors.Is(err, io.EOF) {
				_ = tc.CloseWrite()
			}
			return
		}
	}
}
