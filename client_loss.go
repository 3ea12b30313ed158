// Losing the connection: noticing its end, dropping it so the next caller
// re-dials, outcome timeouts that declare it dead, and a failed link that
// took it down.

package artemis

import (
	"fmt"

	"github.com/Azure/go-amqp"
)

// watch reports the connection's end as soon as it happens, so a loss is
// seen even while every link is idle.
func (c *brokerClient) watch(cn *connection) {
	<-cn.conn.Done()
	err := cn.conn.Err()
	if err == nil {
		err = ErrClosed
	}
	cn.lose(err)
	c.drop(cn, cn.conn.Err())
}

// drop forgets a lost connection, so the next user dials again, starting
// with the URL after the one that was lost (the backup of a live/backup
// pair).
func (c *brokerClient) drop(cn *connection, cause error) {
	if cause != nil {
		cn.lose(cause)
	} else {
		cn.lose(&amqp.ConnError{})
	}
	c.mu.Lock()
	if c.cur != cn {
		c.mu.Unlock()
		return
	}
	c.cur = nil
	c.next = (cn.idx + 1) % len(c.brokers)
	closed := c.closed
	var ev ConnectionEvent
	if !closed {
		if cause == nil {
			cause = &amqp.ConnError{}
		}
		// Tracked with c.cur's change: a re-dial, which needs c.mu, tracks
		// its connection after this loss, whenever the reports run.
		ev = c.scrub(ConnectionEvent{Kind: EventDisconnected, URL: cn.url, Err: cause})
		c.track(ev)
	}
	c.mu.Unlock()
	// In the background: closing a half-open connection must not hold up
	// the caller that noticed it.
	go func() { _ = cn.conn.Close() }()
	if !closed {
		c.report(ev)
	}
}

// outcomeTimedOut counts a transfer on cn that ended by its context while
// waiting for the broker's outcome. Enough of them in a row, with no
// outcome in between, and cn is taken for dead (a half-open network that
// still carries heartbeats, or a broker that stopped answering): it is
// dropped, so the next caller re-dials, starting with the next URL.
func (c *brokerClient) outcomeTimedOut(cn *connection, err error) {
	n := cn.timeouts.Add(1)
	if c.outcomeTimeouts <= 0 || int(n) < c.outcomeTimeouts {
		return
	}
	c.drop(cn, fmt.Errorf("%d transfers in a row got no outcome before their context ended; taking the connection for dead: %w", n, err))
}

// linkFailed is told of every failure of a link on cn; when the failure
// took the session or the connection down, the connection is dropped.
func (c *brokerClient) linkFailed(cn *connection, err error) {
	if cn.dead() || connectionLost(err) {
		c.drop(cn, err)
	}
}
