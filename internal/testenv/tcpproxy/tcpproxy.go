// Package tcpproxy is a test helper: a TCP proxy on 127.0.0.1 between the code under test and a shared
// backing service. Cutting it is how a test loses "the broker" without stopping the real one, which
// other tests are using at the same time.
package tcpproxy

import (
	"net"
	"net/url"
	"sync"
	"sync/atomic"
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
	// stalls counts Stall calls; a connection opened before the last one forwards nothing more.
	stalls atomic.Int64
	// afterOpen: connections accepted from now on stall once the broker's connection.open-ok is through.
	afterOpen atomic.Bool

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

// Stall makes every connection open now half-open, for good: both sides stay connected and what either
// sends is read and dropped, so neither sees an answer or a close (a network that drops packets, a
// peer that froze). Connections opened later pass. Proxies of ForURL and New only.
func (p *Proxy) Stall() { p.stalls.Add(1) }

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
		if p.pg {
			lost := new(atomic.Bool) // this connection's COMMIT answer is being lost
			p.wg.Go(func() { p.pipeAnswers(c, up, lost) })
			p.wg.Go(func() { p.pipeWatched(up, c, lost) })
		} else {
			epoch := p.stalls.Load()
			held := new(atomic.Bool) // this connection stalled on its own (StallAfterAMQPOpen)
			var openOk *openOkWatcher
			if p.afterOpen.Load() {
				openOk = &openOkWatcher{}
			}
			p.wg.Go(func() { p.pipe(c, up, epoch, held, openOk) })
			p.wg.Go(func() { p.pipe(up, c, epoch, held, nil) })
		}
	}
}

// pipe copies one direction until the connection stalls: Stall called after it was opened at epoch, or
// held set (this connection alone; both directions share it, and openOk, on the broker's side of a
// connection accepted after StallAfterAMQPOpen, sets it once connection.open-ok is through). Stalled,
// it drops what it reads, src's close included: dst stays open and hears nothing (a broker that gave up
// on a stalled client closed its side, and the client saw that close through the proxy) until dst
// closes itself (the other direction then drops both) or Cut. Unstalled, its end closes both sides.
func (p *Proxy) pipe(dst, src net.Conn, epoch int64, held *atomic.Bool, openOk *openOkWatcher) {
	buf := make([]byte, 32<<10)
	passes := func() bool { return p.stalls.Load() == epoch && !held.Load() }
	for {
		n, err := src.Read(buf)
		if n > 0 && passes() {
			chunk, opened := buf[:n], false
			if openOk != nil {
				var end int
				if end, opened = openOk.feed(chunk); opened {
					chunk = chunk[:end]
				}
			}
			if _, werr := dst.Write(chunk); werr != nil {
				break
			}
			if opened {
				held.Store(true)
			}
		}
		if err != nil {
			if !passes() {
				return
			}
			break
		}
	}
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
// one has been sent whole and LoseNextCommitAnswer is armed, it marks the connection lost before it
// hands the last bytes on, so that pipeAnswers swallows the server's answer and then cuts the client.
// It stops reading then: the client sends nothing more before that answer.
func (p *Proxy) pipeWatched(up, c net.Conn, lost *atomic.Bool) {
	var w commitWatch
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			match := p.lose.Load()
			lose := w.feed(buf[:n], match) && p.lose.CompareAndSwap(match, nil)
			if lose {
				p.lostCommits.Add(1)
				lost.Store(true)
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

// pipeAnswers copies the server's answers to client c, as pipe does. On a connection whose COMMIT
// answer is being lost, it keeps what the server sends instead (for LostCommitAnswers) until the
// answer is whole (its ReadyForQuery), and then closes both sides: the server has run the COMMIT to
// its end, and the client sees its connection break with the request written and no answer.
func (p *Proxy) pipeAnswers(c, up net.Conn, lost *atomic.Bool) {
	buf := make([]byte, 32<<10)
	var answer []byte
	for {
		n, err := up.Read(buf)
		if n > 0 && lost.Load() {
			answer = append(answer, buf[:n]...)
			if answered(answer) {
				p.keepLostAnswer(answer)
				break
			}
		} else if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	p.drop(c, up)
}

func (p *Proxy) close() {
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
