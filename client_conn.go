// The connection: one open AMQP connection and its session, the dial round
// that callers share and the backoff pause between rounds, and the seams
// between the Client and go-amqp. Dialling it lives in client_dial.go,
// losing it in client_loss.go.

package artemis

import (
	"context"
	"sync/atomic"

	"github.com/Azure/go-amqp"
	"github.com/babelqueue/babelqueue-go-artemis/internal/wireprobe"
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

// answered resets the count of outcome timeouts: the broker answered a
// transfer on cn. Read first, and written only when not already zero: every
// publish ends here, and a store from each of them would bounce the
// counter's cache line between the cores that publish.
func (cn *connection) answered() {
	if cn.timeouts.Load() != 0 {
		cn.timeouts.Store(0)
	}
}

func (cn *connection) dead() bool {
	select {
	case <-cn.conn.Done():
		return true
	default:
		return false
	}
}

// dialAMQP dials one broker with go-amqp. The URL it passes carries no
// userinfo: the credentials travel in the SASL option only.
func dialAMQP(ctx context.Context, b *broker) (amqpConn, error) {
	opts := b.opts
	if b.plain {
		opts.SASLType = amqp.SASLTypePlain(b.user, b.pass)
	}
	// A port of the other transport (plain AMQP to a TLS acceptor, or TLS
	// to a plain one) fails at once with what to use, not at the timeout.
	conn, err := wireprobe.Guard(ctx, b.addr, func(ctx context.Context) (*amqp.Conn, error) {
		return amqp.Dial(ctx, b.addr, &opts)
	})
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

// dialCall is one round over the URL list that callers wait for.
type dialCall struct {
	done    chan struct{}
	cancel  context.CancelFunc
	err     error // set before done is closed
	waiters int   // guarded by Client.mu
	patient int   // guarded by Client.mu: waiters that wait through a failure
	aborted bool  // guarded by Client.mu: cancelled, no one waited any more
}

// dialPause is the backoff wait before the next dial round.
type dialPause struct {
	done      chan struct{}
	event     ConnectionEvent // EventBackoff, reported once
	announced bool            // guarded by Client.mu
}
