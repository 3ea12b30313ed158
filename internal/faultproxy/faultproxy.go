// Package faultproxy is a TCP proxy on the loopback interface that injects
// network faults between a client and one upstream (an Artemis AMQP port),
// for the library's fault tests.
//
// Faults are switched at run time, while connections are open, from any
// goroutine:
//
//   - Reset aborts every open connection with a TCP RST on both sides.
//   - Stall stops carrying bytes in both directions without closing anything
//     (no FIN, no RST; a FIN that arrives is held like the bytes before it):
//     a half-open network. Bytes are held, not dropped:
//     a real path that loses packets has them retransmitted by TCP once it
//     comes back, so after Heal the held bytes are delivered in order, as a
//     healed network would. While stalled each direction reads ahead at most
//     a bounded buffer, after which the sender's kernel buffers fill and its
//     writes block, as on a real stalled path.
//   - Blackhole is Stall plus: new connections are accepted but the upstream
//     is not even dialled, so not one byte is forwarded (a black-holed URL).
//     On Heal they dial the upstream and start carrying bytes.
//   - Latency delays every chunk by d in each direction (a round trip gains
//     2d), preserving order and without limiting throughput to a chunk per d.
//   - CutAfter aborts each connection with an RST once a random number of
//     bytes in [min, max], counted over both directions together, has passed
//     through it: exactly that many bytes are forwarded, then the RST.
//
// Every blocking operation is bounded by Close: it stops the listener,
// aborts every connection (with an RST, not counted in Stats.Resets) and
// returns once every goroutine has exited.
//
// Typical use in a fault test:
//
//	p, err := faultproxy.Start("127.0.0.1:5672", faultproxy.WithSeed(42))
//	...
//	defer p.Close()
//	url, _ := p.Rewrite(brokerURL) // same credentials, the proxy's port
//	// dial url; then p.Reset(), p.Stall() ... p.Heal(), p.CutAfter(20<<10, 300<<10)
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

const (
	chunkSize   = 32 << 10         // bytes read at once
	queueChunks = 16               // chunks one direction reads ahead of its writer
	dialTimeout = 10 * time.Second // bound on one upstream dial
)

// Stats are the proxy's counters since Start.
type Stats struct {
	Accepted  int64 // connections accepted from clients
	Open      int64 // connections open now
	BytesUp   int64 // bytes forwarded client to upstream
	BytesDown int64 // bytes forwarded upstream to client
	Resets    int64 // connections aborted with an RST by Reset or CutAfter
	Cuts      int64 // of Resets, those done by CutAfter
	DialFails int64 // upstream dials that failed (the client was then reset)
}

// Option configures Start.
type Option func(*config)

type config struct {
	listen string
	seed   uint64
}

// WithListen sets the listen address (default "127.0.0.1:0", a free port).
// It must be a loopback IP address.
func WithListen(addr string) Option { return func(c *config) { c.listen = addr } }

// WithSeed seeds the random source CutAfter draws from (default 1), so a
// test can reproduce its cut points.
func WithSeed(seed uint64) Option { return func(c *config) { c.seed = seed } }

// Proxy is a running fault proxy. Its methods are safe for concurrent use.
type Proxy struct {
	upstream string
	ln       net.Listener
	ctx      context.Context // cancelled by Close
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	mu        sync.Mutex
	conns     map[*conn]struct{}
	stalled   bool          // no bytes carried
	blackhole bool          // new connections do not dial the upstream
	changed   chan struct{} // closed and replaced when stalled or blackhole changes
	latency   time.Duration
	cutMin    int64 // 0: no cut
	cutMax    int64
	rng       *rand.Rand

	accepted, open, bytesUp, bytesDown, resets, cuts, dialFails atomic.Int64
	closeOnce                                                   sync.Once
}

// Start listens on a loopback address and forwards every connection to
// upstream, a loopback "ip:port". Non-loopback addresses are refused.
func Start(upstream string, opts ...Option) (*Proxy, error) {
	cfg := config{listen: "127.0.0.1:0", seed: 1}
	for _, o := range opts {
		o(&cfg)
	}
	if err := checkLoopback("upstream", upstream); err != nil {
		return nil, err
	}
	if err := checkLoopback("listen", cfg.listen); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		upstream: upstream, ln: ln, ctx: ctx, cancel: cancel,
		conns: map[*conn]struct{}{}, changed: make(chan struct{}),
		rng: rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x9e3779b97f4a7c15)),
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

func checkLoopback(what, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("faultproxy: %s address %q: %w", what, addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("faultproxy: %s address %q is not a loopback IP address", what, addr)
	}
	return nil
}

// Addr is the proxy's listen address, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is "amqp://" plus Addr, without credentials.
func (p *Proxy) URL() string { return "amqp://" + p.Addr() }

// Rewrite returns brokerURL with its host and port replaced by the proxy's,
// keeping scheme, credentials, path and query.
func (p *Proxy) Rewrite(brokerURL string) (string, error) {
	u, err := url.Parse(brokerURL)
	if err != nil {
		return "", errors.New("faultproxy: broker URL does not parse") // the URL may hold a password
	}
	u.Host = p.Addr()
	return u.String(), nil
}

// Stats returns the counters.
func (p *Proxy) Stats() Stats {
	return Stats{
		Accepted: p.accepted.Load(), Open: p.open.Load(), BytesUp: p.bytesUp.Load(), BytesDown: p.bytesDown.Load(),
		Resets: p.resets.Load(), Cuts: p.cuts.Load(), DialFails: p.dialFails.Load(),
	}
}

// Reset aborts every open connection with an RST on both sides and returns
// how many it aborted. New connections are still accepted.
func (p *Proxy) Reset() int {
	p.mu.Lock()
	open := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		open = append(open, c)
	}
	p.mu.Unlock()
	n := 0
	for _, c := range open {
		if c.close(true, &p.resets) {
			n++
		}
	}
	return n
}

// Stall stops carrying bytes on open and new connections, closing nothing.
func (p *Proxy) Stall() { p.setMode(true, false) }

// Blackhole stalls like Stall and, in addition, accepts new connections
// without dialling the upstream until Heal.
func (p *Proxy) Blackhole() { p.setMode(true, true) }

// Heal ends Stall and Blackhole: held bytes are delivered in order and
// black-holed connections dial the upstream.
func (p *Proxy) Heal() { p.setMode(false, false) }

func (p *Proxy) setMode(stalled, blackhole bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled == stalled && p.blackhole == blackhole {
		return
	}
	p.stalled, p.blackhole = stalled, blackhole
	close(p.changed)
	p.changed = make(chan struct{})
}

// mode returns whether bytes are held (or the upstream not dialled, with
// blackhole true) and a channel closed on the next change.
func (p *Proxy) mode(blackhole bool) (hold bool, changed <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if blackhole {
		return p.blackhole, p.changed
	}
	return p.stalled, p.changed
}

// Latency delays every chunk read from now on by d in each direction; 0
// turns it off.
func (p *Proxy) Latency(d time.Duration) {
	p.mu.Lock()
	p.latency = max(d, 0)
	p.mu.Unlock()
}

// CutAfter makes each connection, open or new, abort with an RST after a
// random number of bytes in [min, max] (both directions together, counted
// from this call for open connections) has passed through it. CutAfter(0, 0)
// turns it off. It returns an error when the range is invalid (min < 1 with
// max > 0, or max < min).
func (p *Proxy) CutAfter(min, max int) error {
	if min < 0 || max < min || (max > 0 && min == 0) {
		return fmt.Errorf("faultproxy: invalid cut range [%d, %d]", min, max)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutMin, p.cutMax = int64(min), int64(max)
	for c := range p.conns {
		c.setBudget(p.drawLocked())
	}
	return nil
}

// drawLocked draws a cut budget (-1: none); p.mu is held.
func (p *Proxy) drawLocked() int64 {
	if p.cutMax == 0 {
		return -1
	}
	return p.cutMin + p.rng.Int64N(p.cutMax-p.cutMin+1)
}

// Close stops accepting, aborts every connection and returns once every
// goroutine of the proxy has exited. It is idempotent.
func (p *Proxy) Close() error {
	var err error
	p.closeOnce.Do(func() {
		p.cancel()
		err = p.ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			c.abort()
		}
		p.mu.Unlock()
	})
	p.wg.Wait()
	return err
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			select { // a transient error such as EMFILE: retry after a pause
			case <-time.After(10 * time.Millisecond):
				continue
			case <-p.ctx.Done():
				return
			}
		}
		p.accepted.Add(1)
		p.open.Add(1)
		c := &conn{p: p, client: nc.(*net.TCPConn)}
		c.ctx, c.cancel = context.WithCancel(p.ctx)
		c.done = c.ctx.Done()
		p.mu.Lock()
		if p.ctx.Err() != nil {
			p.mu.Unlock()
			c.abort()
			return
		}
		c.budget = p.drawLocked()
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go c.run()
	}
}
