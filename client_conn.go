// The connection: one open AMQP connection and its session, its loss
// detection, error classification and the seams between the Client and
// go-amqp. Dialling it lives in client_dial.go.

package artemis

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/Azure/go-amqp"
)

// connection is one open AMQP connection and its session.
type connection struct {
	conn amqpConn
	sess amqpSession
	idx  int    // index of the broker URL
	url  string // shown URL

	// replaced is closed when a newer connection opened.
	replaced chan struct{}
	// lost ends, with the cause, once the connection is known to be dead
	// or dropped: a hook for whatever runs on it.
	lost context.Context
	lose context.CancelCauseFunc
	// timeouts counts transfers in a row that ended by their context while
	// waiting for an outcome.
	timeouts atomic.Int32
}

func (cn *connection) dead() bool {
	select {
	case <-cn.conn.Done():
		return true
	default:
		return false
	}
}

// watch reports the connection's end as soon as it happens, so a loss is
// seen even while every link is idle.
func (c *Client) watch(cn *connection) {
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
func (c *Client) drop(cn *connection, cause error) {
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
	c.mu.Unlock()
	// In the background: closing a half-open connection must not hold up
	// the caller that noticed it.
	go func() { _ = cn.conn.Close() }()
	if !closed {
		if cause == nil {
			cause = &amqp.ConnError{}
		}
		c.emit(ConnectionEvent{Kind: EventDisconnected, URL: cn.url, Err: cause})
	}
}

// outcomeTimedOut counts a transfer on cn that ended by its context while
// waiting for the broker's outcome. Enough of them in a row, with no
// outcome in between, and cn is taken for dead (a half-open network that
// still carries heartbeats, or a broker that stopped answering): it is
// dropped, so the next caller re-dials, starting with the next URL.
func (c *Client) outcomeTimedOut(cn *connection, err error) {
	n := cn.timeouts.Add(1)
	if c.outcomeTimeouts <= 0 || int(n) < c.outcomeTimeouts {
		return
	}
	c.drop(cn, fmt.Errorf("babelqueue: %d transfers in a row got no outcome before their context ended; taking the connection for dead: %w", n, err))
}

// linkFailed is told of every failure of a link on cn; when the failure
// took the session or the connection down, the connection is dropped.
func (c *Client) linkFailed(cn *connection, err error) {
	if cn.dead() || connectionLost(err) {
		c.drop(cn, err)
	}
}

// dialAMQP dials one broker with go-amqp. The URL it passes carries no
// userinfo: the credentials travel in the SASL option only.
func dialAMQP(ctx context.Context, b *broker) (amqpConn, error) {
	opts := b.opts
	if b.plain {
		opts.SASLType = amqp.SASLTypePlain(b.user, b.pass)
	}
	conn, err := amqp.Dial(ctx, b.addr, &opts)
	if err != nil {
		return nil, err
	}
	return goAMQPConn{conn}, nil
}

type goAMQPConn struct{ c *amqp.Conn }

func (g goAMQPConn) NewSession(ctx context.Context, opts *amqp.SessionOptions) (amqpSession, error) {
	s, err := g.c.NewSession(ctx, opts)
	if err != nil {
		return nil, err
	}
	return goAMQPSession{s}, nil
}

func (g goAMQPConn) Done() <-chan struct{} { return g.c.Done() }
func (g goAMQPConn) Err() error            { return g.c.Err() }
func (g goAMQPConn) Close() error          { return g.c.Close() }

type goAMQPSession struct{ s *amqp.Session }

func (g goAMQPSession) NewSender(ctx context.Context, target string, opts *amqp.SenderOptions) (linkSender, error) {
	s, err := g.s.NewSender(ctx, target, opts)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (g goAMQPSession) NewReceiver(ctx context.Context, source string, opts *amqp.ReceiverOptions) (linkReceiver, error) {
	r, err := g.s.NewReceiver(ctx, source, opts)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// The seams between the Client and go-amqp, so tests can fake the broker.
type (
	dialFunc func(ctx context.Context, b *broker) (amqpConn, error)

	amqpConn interface {
		NewSession(ctx context.Context, opts *amqp.SessionOptions) (amqpSession, error)
		Done() <-chan struct{}
		Err() error
		Close() error
	}

	amqpSession interface {
		NewSender(ctx context.Context, target string, opts *amqp.SenderOptions) (linkSender, error)
		NewReceiver(ctx context.Context, source string, opts *amqp.ReceiverOptions) (linkReceiver, error)
	}

	linkSender interface {
		Sender
		Close(ctx context.Context) error
	}

	linkReceiver interface {
		Receiver
		Close(ctx context.Context) error
	}
)
