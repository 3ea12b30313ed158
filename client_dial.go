// Dialling: the one re-dial over the broker URL list that concurrent
// callers share, its backoff pauses, and publishers and consumers waiting
// through an outage.

package artemis

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// connection returns the open connection, dialing once over the URL list
// when there is none or it died (Dial, and callers that fail fast).
func (c *brokerClient) connection(ctx context.Context) (*connection, error) {
	return c.conn(ctx, false)
}

// awaitConnection returns the open connection, waiting within ctx for the
// Client's re-dials (paced by its backoff) while there is none.
func (c *brokerClient) awaitConnection(ctx context.Context) (*connection, error) {
	return c.conn(ctx, true)
}

// conn returns the open connection. When there is none, concurrent callers
// share one dial, which runs under the Client's own context (Close cuts it
// short) and goes on for as long as anyone waits for it. After a failed
// round over the URL list the next one waits a backoff step: a caller that
// waits sleeps through it, one that does not returns that round's error at
// once, without dialing.
func (c *brokerClient) conn(ctx context.Context, wait bool) (*connection, error) {
	for waited := false; ; waited = true {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			if waited {
				return nil, c.gaveUp(ErrClosed, nil)
			}
			return nil, ErrClosed
		}
		if cn := c.cur; cn != nil {
			c.mu.Unlock()
			if !cn.dead() {
				return cn, nil
			}
			c.drop(cn, cn.conn.Err())
			continue
		}
		if p := c.pause; p != nil {
			err := c.lastErr
			announce := wait && !p.announced
			p.announced = p.announced || wait
			c.mu.Unlock()
			if !wait {
				return nil, err
			}
			if announce {
				// Once per step, when someone waits through it.
				c.emit(p.event)
			}
			select {
			case <-p.done:
				continue
			case <-ctx.Done():
				return nil, c.gaveUp(ctx.Err(), err)
			case <-c.done:
				return nil, c.gaveUp(ErrClosed, err)
			}
		}
		call := c.dialing
		joined := call != nil
		if !joined {
			call = c.startDial()
		}
		call.waiters++
		if wait {
			call.patient++
		}
		c.mu.Unlock()
		if joined && c.joined != nil {
			c.joined()
		}
		select {
		case <-call.done:
			if call.err == nil || wait || call.aborted {
				continue
			}
			return nil, call.err
		case <-ctx.Done():
			c.leave(call, wait)
			return nil, c.gaveUp(ctx.Err(), nil)
		case <-c.done:
			return nil, c.gaveUp(ErrClosed, nil)
		}
	}
}

// gaveUp is the error of a caller that stopped waiting for a connection:
// it matches ErrConnect and why (ctx's error or ErrClosed), and quotes the
// last round's failure when there was one.
func (c *brokerClient) gaveUp(why, last error) error {
	if last == nil {
		c.mu.Lock()
		last = c.lastErr
		c.mu.Unlock()
	}
	if last != nil && !errors.Is(why, ErrClosed) {
		return fmt.Errorf("%w: gave up waiting for a connection: %w (last attempt: %w)", ErrConnect, why, last)
	}
	return fmt.Errorf("%w: gave up waiting for a connection: %w", ErrConnect, why)
}

// leave takes a waiter off call; the dial is cancelled when no one is left
// waiting for it, and the next caller dials afresh.
func (c *brokerClient) leave(call *dialCall, wait bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	call.waiters--
	if wait {
		call.patient--
	}
	if call.waiters == 0 && c.dialing == call {
		call.aborted = true
		c.dialing = nil
		call.cancel()
	}
}

// startDial starts a round over the URL list in the background. c.mu is
// held.
func (c *brokerClient) startDial() *dialCall {
	dctx, cancel := context.WithCancel(c.ctx)
	call := &dialCall{done: make(chan struct{}), cancel: cancel}
	c.dialing = call
	start := c.next
	go c.runDial(dctx, call, start)
	return call
}

func (c *brokerClient) runDial(ctx context.Context, call *dialCall, start int) {
	cn, err := c.connect(ctx, start)
	call.cancel()

	c.mu.Lock()
	if c.dialing == call {
		c.dialing = nil
	}
	aborted := call.aborted
	// A connection nobody wants is closed once c.mu is let go: its close
	// may hang on a half-open network (go-amqp waits up to the idle timeout
	// for the broker's answer), and no other caller may wait behind it.
	var unwanted amqpConn
	switch {
	case err == nil && c.closed:
		unwanted = cn.conn
		err = ErrClosed
	case err == nil && aborted:
		// No one waits for it any more; a newer dial may be running.
		unwanted = cn.conn
		err = context.Canceled
	}
	var connected, backoff *ConnectionEvent
	switch {
	case err == nil:
		kind := EventConnected
		if c.connected {
			kind = EventReconnected
		}
		// Tracked with c.cur's change, as a loss is (see drop).
		ev := c.scrub(ConnectionEvent{Kind: kind, URL: cn.url})
		c.track(ev)
		connected = &ev
		c.cur = cn
		c.connected = true
		c.failures = 0
		c.lastErr = nil
		if c.last != nil {
			close(c.last.replaced)
		}
		c.last = cn
	case !aborted && !c.closed:
		delay := c.backoff.Delay(c.failures, c.random())
		c.failures++
		c.lastErr = err
		p := &dialPause{done: make(chan struct{}), event: ConnectionEvent{Kind: EventBackoff, Attempt: c.failures, Delay: delay, Err: err}}
		c.pause = p
		if call.patient > 0 {
			// Once per step, when someone waits through it.
			p.announced = true
			backoff = &p.event
		}
		go c.endPause(p, delay)
	}
	call.err = err
	c.mu.Unlock()

	if unwanted != nil {
		_ = unwanted.Close()
	}
	if backoff != nil {
		c.emit(*backoff)
	}
	if connected != nil {
		c.report(*connected)
		go c.watch(cn)
	}
	close(call.done)
}

// endPause ends a backoff wait between dial rounds after delay (or at
// Close).
func (c *brokerClient) endPause(p *dialPause, delay time.Duration) {
	select {
	case <-c.after(delay):
	case <-c.done:
	}
	c.mu.Lock()
	if c.pause == p {
		c.pause = nil
	}
	c.mu.Unlock()
	close(p.done)
}

// connect tries each broker URL once, from start on.
func (c *brokerClient) connect(ctx context.Context, start int) (*connection, error) {
	var errs []error
	for i := range c.brokers {
		idx := (start + i) % len(c.brokers)
		cn, err := c.connectTo(ctx, idx)
		if err == nil {
			return cn, nil
		}
		err = &urlError{url: c.brokers[idx].shown, err: c.red.error(err)}
		errs = append(errs, err)
		c.emit(ConnectionEvent{Kind: EventDialFailed, URL: c.brokers[idx].shown, Err: err})
		if ctx.Err() != nil {
			break
		}
	}
	return nil, &connectError{errs: errs}
}

func (c *brokerClient) connectTo(ctx context.Context, idx int) (*connection, error) {
	b := &c.brokers[idx]
	dctx, cancel := context.WithTimeout(ctx, c.dialTimeout)
	defer cancel()
	var (
		conn amqpConn
		sess amqpSession
		err  error
	)
	// A connection router answers with amqp:connection:redirect (at the
	// open or at the first begin) naming the member to use: follow it, a
	// few hops at most, with the same credentials and TLS settings.
	for hop := 0; ; hop++ {
		conn, sess, err = c.open(dctx, b)
		target, ok := redirectOf(err)
		if !ok {
			break
		}
		if hop == maxRedirects {
			err = fmt.Errorf("more than %d redirects: %w", maxRedirects, err)
			break
		}
		nb, rerr := b.redirected(target)
		if rerr != nil {
			err = fmt.Errorf("%w (following it: %w)", err, rerr)
			break
		}
		b = &nb
	}
	if err == nil {
		cn := &connection{conn: conn, sess: sess, idx: idx, url: b.shown, replaced: make(chan struct{})}
		cn.lost, cn.lose = context.WithCancelCause(context.Background())
		return cn, nil
	}
	if ctx.Err() == nil && dctx.Err() != nil {
		err = fmt.Errorf("no connection within %v: %w", c.dialTimeout, err)
	}
	return nil, err
}

// open dials b and begins a session on the connection.
func (c *brokerClient) open(ctx context.Context, b *broker) (amqpConn, amqpSession, error) {
	conn, err := c.dial(ctx, b)
	if err != nil {
		return nil, nil, err
	}
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("begin session: %w", err)
	}
	return conn, sess, nil
}

// sleep waits d, or until wake is closed (nil: never), and reports false
// when ctx ended or the Client was closed first.
func (c *brokerClient) sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	select {
	case <-c.after(d):
		return true
	case <-wake:
		return true
	case <-ctx.Done():
		return false
	case <-c.done:
		return false
	}
}
