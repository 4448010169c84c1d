// Package tcpproxy is a test helper: a TCP proxy on 127.0.0.1 between the code under test and a shared
// backing service. Cutting it is how a test loses "the broker" without stopping the real one, which
// other tests are using at the same time.
package tcpproxy

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy forwards every accepted connection to a target address until Cut.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup

	pgState // Postgres proxies only (pgcommit.go)
}

// New starts a proxy to target (host:port) and stops it when t ends.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	return start(t, target, false)
}

func start(t testing.TB, target string, pg bool) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("tcpproxy: listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.pg = pg
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// ForURL starts a proxy to the host of rawURL and returns the same URL pointing at the proxy.
func ForURL(t testing.TB, rawURL string) (*Proxy, string) {
	t.Helper()
	return forURL(t, rawURL, false)
}

func forURL(t testing.TB, rawURL string, pg bool) (*Proxy, string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("tcpproxy: parse %q: %v", rawURL, err)
	}
	p := start(t, u.Host, pg)
	u.Host = p.Addr()
	return p, u.String()
}

// Addr is the proxy's listening address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every open connection (both sides see a reset, as when a broker dies) and refuses new
// ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// Restore accepts and forwards connections again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // listener closed
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.mu.Unlock()
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.cut { // cut while dialling
			p.mu.Unlock()
			_ = c.Close()
			_ = up.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(c, up) })
		if p.pg {
			p.wg.Go(func() { p.pipeWatched(up, c) })
		} else {
			p.wg.Go(func() { p.pipe(up, c) })
		}
	}
}

// pipe copies one direction; when it ends it closes both sides, so the other direction ends too.
func (p *Proxy) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	p.drop(dst, src)
}

// drop closes both sides of a proxied connection and forgets them.
func (p *Proxy) drop(a, b net.Conn) {
	_ = a.Close()
	_ = b.Close()
	p.mu.Lock()
	delete(p.conns, a)
	delete(p.conns, b)
	p.mu.Unlock()
}

// pipeWatched copies what client c sends to the server up, as pipe does, watching for a COMMIT. When
// one has been sent whole and LoseNextCommitAnswer is armed, it closes c and only then hands the last
// bytes on, so no answer can reach the client. up stays open: pipe (server to client) closes it when
// the server answers and the answer finds c closed, so the server always gets the COMMIT whole.
func (p *Proxy) pipeWatched(up, c net.Conn) {
	var w commitWatch
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			lose := w.feed(buf[:n]) && p.loseCommit.CompareAndSwap(true, false)
			if lose {
				p.lostCommits.Add(1)
				_ = c.Close()
			}
			if _, werr := up.Write(buf[:n]); werr != nil {
				break
			}
			if lose {
				return
			}
		}
		if err != nil {
			break
		}
	}
	p.drop(up, c)
}

func (p *Proxy) close() {
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
