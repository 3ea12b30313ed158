package faultproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// conn is one proxied connection.
type conn struct {
	p        *Proxy
	client   *net.TCPConn
	upstream *net.TCPConn // set once by run, before the pumps start

	ctx    context.Context // cancelled by abort
	cancel context.CancelFunc
	done   <-chan struct{} // ctx.Done()

	mu      sync.Mutex
	budget  int64 // bytes left before the cut; -1: no cut
	aborted bool
	halves  atomic.Int32 // directions that finished with a FIN
}

type chunk struct {
	b  []byte
	at time.Time // when it may be written
}

func (c *conn) setBudget(b int64) {
	c.mu.Lock()
	c.budget = b
	c.mu.Unlock()
}

// abort closes both sides with an RST; it reports whether this call did it.
func (c *conn) abort() bool { return c.close(true) }

// close closes both sides, with an RST if rst, after adding one to each of
// counters; it reports whether this call did it.
func (c *conn) close(rst bool, counters ...*atomic.Int64) bool {
	c.mu.Lock()
	if c.aborted {
		c.mu.Unlock()
		return false
	}
	c.aborted = true
	c.p.open.Add(-1)
	for _, n := range counters {
		n.Add(1)
	}
	c.cancel()
	up := c.upstream
	c.mu.Unlock()
	for _, tc := range []*net.TCPConn{c.client, up} {
		if tc != nil {
			if rst {
				_ = tc.SetLinger(0)
			}
			_ = tc.Close()
		}
	}
	return true
}

func (c *conn) run() {
	defer c.p.wg.Done()
	defer func() {
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
	}()
	for { // black-holed: hold the client, dial nothing
		hole, changed := c.p.mode(true)
		if !hole {
			break
		}
		select {
		case <-changed:
		case <-c.done:
			return
		}
	}
	ctx, cancel := context.WithTimeout(c.ctx, dialTimeout) // ends with the connection too
	nc, err := (&net.Dialer{}).DialContext(ctx, "tcp", c.p.upstream)
	cancel()
	if err != nil {
		if c.ctx.Err() == nil { // not a Reset or Close during the dial
			c.p.dialFails.Add(1)
		}
		c.abort()
		return
	}
	c.mu.Lock()
	c.upstream = nc.(*net.TCPConn)
	aborted := c.aborted
	c.mu.Unlock()
	if aborted {
		_ = c.upstream.SetLinger(0)
		_ = c.upstream.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Add(4)
	up, down := make(chan chunk, queueChunks), make(chan chunk, queueChunks)
	go c.read(&wg, c.client, up)
	go c.write(&wg, c.upstream, up, &c.p.bytesUp)
	go c.read(&wg, c.upstream, down)
	go c.write(&wg, c.client, down, &c.p.bytesDown)
	wg.Wait()
}

// read moves chunks from src into q; it closes q on EOF and aborts the
// connection on any other error.
func (c *conn) read(wg *sync.WaitGroup, src *net.TCPConn, q chan<- chunk) {
	defer wg.Done()
	buf := make([]byte, chunkSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			c.p.mu.Lock()
			at := time.Now().Add(c.p.latency)
			c.p.mu.Unlock()
			select {
			case q <- chunk{append([]byte(nil), buf[:n]...), at}:
			case <-c.done:
				return
			}
		}
		if errors.Is(err, io.EOF) {
			close(q)
			return
		}
		if err != nil {
			c.abort()
			return
		}
	}
}

// write moves chunks from q to dst after their latency, while not stalled,
// within the cut budget; at the end of q (once not stalled: a stall holds
// the FIN too) it half-closes dst.
func (c *conn) write(wg *sync.WaitGroup, dst *net.TCPConn, q <-chan chunk, count *atomic.Int64) {
	defer wg.Done()
	for {
		var ch chunk
		var ok bool
		select {
		case ch, ok = <-q:
		case <-c.done:
			return
		}
		if d := time.Until(ch.at); ok && d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-c.done:
				t.Stop()
				return
			}
		}
		for {
			hold, changed := c.p.mode(false)
			if !hold {
				break
			}
			select {
			case <-changed:
			case <-c.done:
				return
			}
		}
		if !ok {
			_ = dst.CloseWrite()
			if c.halves.Add(1) == 2 {
				c.close(false) // both directions ended with a FIN
			}
			return
		}
		b, cut := c.take(ch.b)
		count.Add(int64(len(b))) // before the peer can see them; corrected below on a short write
		n, err := dst.Write(b)
		count.Add(int64(n - len(b)))
		if cut {
			c.close(true, &c.p.resets, &c.p.cuts)
			return
		}
		if err != nil {
			c.abort()
			return
		}
	}
}

// take reserves b's bytes from the cut budget: the part to write, and
// whether the connection is cut after it.
func (c *conn) take(b []byte) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.budget < 0 {
		return b, false
	}
	if int64(len(b)) < c.budget {
		c.budget -= int64(len(b))
		return b, false
	}
	b = b[:c.budget]
	c.budget = 0
	return b, true
}
