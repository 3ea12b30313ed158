// Connection supervision: dialling the URL list, loss detection, error
// classification and the seams between the Client and go-amqp.

package artemis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"time"

	"github.com/Azure/go-amqp"
)

// broker is one URL as the Client dials and shows it.
type broker struct {
	addr  string // the URL without userinfo
	shown string // the URL with its password redacted
	user  string
	pass  string
	plain bool // use SASL PLAIN with user and pass
	opts  amqp.ConnOptions
}

// connection is one open AMQP connection and its session.
type connection struct {
	conn amqpConn
	sess amqpSession
	idx  int    // index of the broker URL
	url  string // shown URL
}

func (cn *connection) dead() bool {
	select {
	case <-cn.conn.Done():
		return true
	default:
		return false
	}
}

type dialCall struct {
	done chan struct{}
	err  error
}

func parseBroker(raw string, o *ClientOptions) (broker, error) {
	shown := redactURL(raw)
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse's error quotes the URL, password included: never wrap it.
		return broker{}, fmt.Errorf("%w: broker URL %q does not parse", ErrInvalidConfig, shown)
	}
	switch u.Scheme {
	case "amqp", "amqps", "amqp+ssl":
	default:
		return broker{}, fmt.Errorf("%w: broker URL %q: scheme %q, want amqp or amqps", ErrInvalidConfig, shown, u.Scheme)
	}
	if u.Hostname() == "" {
		return broker{}, fmt.Errorf("%w: broker URL %q has no host", ErrInvalidConfig, shown)
	}
	b := broker{shown: shown}
	switch {
	case o.Username != "" || o.Password != "":
		b.user, b.pass, b.plain = o.Username, o.Password, true
	case u.User != nil:
		b.user = u.User.Username()
		b.pass, _ = u.User.Password()
		b.plain = true
	}
	bare := *u
	bare.User = nil
	b.addr = bare.String()
	return b, nil
}

// connection returns the open connection, dialing when there is none or it
// died. Concurrent callers share one dial.
func (c *Client) connection(ctx context.Context) (*connection, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
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
		if call := c.dialing; call != nil {
			c.mu.Unlock()
			if c.joined != nil {
				c.joined()
			}
			select {
			case <-call.done:
				// Another caller's dial ended; if it gave up only because
				// that caller's context ended, dial again.
				if call.err == nil || ctx.Err() == nil && isContextError(call.err) {
					continue
				}
				return nil, call.err
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		call := &dialCall{done: make(chan struct{})}
		c.dialing = call
		start := c.next
		c.mu.Unlock()

		cn, err := c.connect(ctx, start)

		c.mu.Lock()
		c.dialing = nil
		if err == nil && c.closed {
			_ = cn.conn.Close()
			err = ErrClosed
		}
		reconnect := c.connected
		if err == nil {
			c.cur = cn
			c.connected = true
		}
		call.err = err
		close(call.done)
		c.mu.Unlock()
		if err != nil {
			return nil, err
		}
		kind := EventConnected
		if reconnect {
			kind = EventReconnected
		}
		c.emit(ConnectionEvent{Kind: kind, URL: cn.url})
		go c.watch(cn)
		return cn, nil
	}
}

// connect tries each broker URL once, from start on.
func (c *Client) connect(ctx context.Context, start int) (*connection, error) {
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

func (c *Client) connectTo(ctx context.Context, idx int) (*connection, error) {
	b := &c.brokers[idx]
	dctx, cancel := context.WithTimeout(ctx, c.dialTimeout)
	defer cancel()
	conn, err := c.dial(dctx, b)
	if err == nil {
		var sess amqpSession
		sess, err = conn.NewSession(dctx, nil)
		if err == nil {
			return &connection{conn: conn, sess: sess, idx: idx, url: b.shown}, nil
		}
		_ = conn.Close()
		err = fmt.Errorf("begin session: %w", err)
	}
	if ctx.Err() == nil && dctx.Err() != nil {
		err = fmt.Errorf("no connection within %v: %w", c.dialTimeout, err)
	}
	return nil, err
}

// watch reports the connection's end as soon as it happens, so a loss is
// seen even while every link is idle.
func (c *Client) watch(cn *connection) {
	<-cn.conn.Done()
	c.drop(cn, cn.conn.Err())
}

// drop forgets a lost connection, so the next user dials again, starting
// with the URL after the one that was lost (the backup of a live/backup
// pair).
func (c *Client) drop(cn *connection, cause error) {
	c.mu.Lock()
	if c.cur != cn {
		c.mu.Unlock()
		return
	}
	c.cur = nil
	c.next = (cn.idx + 1) % len(c.brokers)
	closed := c.closed
	c.mu.Unlock()
	_ = cn.conn.Close()
	if !closed {
		if cause == nil {
			cause = &amqp.ConnError{}
		}
		c.emit(ConnectionEvent{Kind: EventDisconnected, URL: cn.url, Err: cause})
	}
}

// linkFailed is told of every failure of a link on cn; when the failure
// took the session or the connection down, the connection is dropped.
func (c *Client) linkFailed(cn *connection, err error) {
	if cn.dead() || connectionLost(err) {
		c.drop(cn, err)
	}
}

// sleep waits d, and reports false when ctx ended or the Client was closed
// first.
func (c *Client) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-c.after(d):
		return true
	case <-ctx.Done():
		return false
	case <-c.done:
		return false
	}
}

func isContextError(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// linkLost reports an error meaning the link, its session or its
// connection is gone. A context's end is not one (context.DeadlineExceeded
// is a net.Error, so it is ruled out first).
func linkLost(err error) bool {
	if err == nil || isContextError(err) {
		return false
	}
	var le *amqp.LinkError
	return errors.As(err, &le) || connectionLost(err)
}

// connectionLost reports an error that takes the session or the whole
// connection down.
func connectionLost(err error) bool {
	if err == nil || isContextError(err) {
		return false
	}
	var (
		se *amqp.SessionError
		ce *amqp.ConnError
		ne net.Error
	)
	return errors.As(err, &se) || errors.As(err, &ce) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
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
