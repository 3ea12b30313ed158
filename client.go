package artemis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/Azure/go-amqp"
)

// Errors of the Client.
var (
	// ErrConnect: no broker URL could be connected to. The error lists each
	// URL (password redacted) with its cause.
	ErrConnect = errors.New("babelqueue: cannot connect to any broker")
	// ErrOutcomeUnknown: the connection or link failed, or the context
	// ended, after a transfer may have been written, so the broker may or
	// may not have stored the message. See Client.Publisher.
	ErrOutcomeUnknown = errors.New("babelqueue: publish outcome unknown, the broker may have stored the message")
	// ErrClosed: the Client, or the ClientPublisher, was closed.
	ErrClosed = errors.New("babelqueue: client closed")
)

// DefaultDialTimeout bounds one connection attempt to one broker URL (TCP,
// TLS, SASL, AMQP open and begin) and one link attach.
const DefaultDialTimeout = 15 * time.Second

// ClientOptions configures a Client. The zero value (or nil) is usable:
// credentials from the URLs' userinfo, no events, no logging.
type ClientOptions struct {
	// Username and Password are SASL PLAIN credentials for every URL. When
	// set they win over credentials in a URL's userinfo; when empty, a URL's
	// userinfo (amqp://user:pass@host:5672) is used; with neither, the
	// SASLType of ConnOptions applies (go-amqp's default: no SASL).
	Username string
	Password string

	// TLSConfig is used for amqps:// URLs (direct TLS, what an Artemis
	// acceptor with sslEnabled=true speaks). go-amqp clones it per
	// connection and sets ServerName to the URL's host when it is empty.
	TLSConfig *tls.Config

	// ConnOptions are the base go-amqp connection options (idle timeout,
	// container id, frame size ...). SASLType and TLSConfig are replaced by
	// the fields above when those are set; leave HostName empty when there
	// is more than one URL.
	ConnOptions *amqp.ConnOptions

	// DialTimeout bounds each connection attempt to one URL and each link
	// attach (default DefaultDialTimeout).
	DialTimeout time.Duration

	// Backoff paces Consume's re-attach attempts (default DefaultBackoff()).
	Backoff *Backoff

	// OnEvent, when set, hears every connection and link event: each loss
	// and each recovery. It is called synchronously from the goroutine that
	// saw the event, possibly from several at once and possibly while a
	// publish or a re-dial waits on it, so it must be safe for concurrent
	// use, must not block and must not call back into the Client or its
	// publishers (hand the event to a channel or a goroutine for that). A
	// panic in it is recovered. The event's URL and Err never carry a
	// password.
	OnEvent func(ConnectionEvent)

	// Logger receives the same events: losses and failures at warn,
	// recoveries at info, backoff waits at debug. No password is ever
	// logged. The default logs nothing.
	Logger *slog.Logger
}

// ConnectionEventKind says what happened to the Client's connection or to
// one of its links.
type ConnectionEventKind int

// The connection events.
const (
	// EventConnected: the first connection opened, to URL.
	EventConnected ConnectionEventKind = iota + 1
	// EventReconnected: a connection opened again after a loss, to URL.
	EventReconnected
	// EventDisconnected: the connection to URL was lost (Err says why).
	EventDisconnected
	// EventDialFailed: connecting to URL failed (Err says why); the next
	// URL, if any, is tried.
	EventDialFailed
	// EventConsumerAttached: Consume attached its receiver to Address and
	// started listening.
	EventConsumerAttached
	// EventConsumerResumed: Consume re-attached to Address after a loss and
	// resumed listening.
	EventConsumerResumed
	// EventConsumerLost: Consume's receiver on Address failed (Err says
	// why); it will re-attach after a backoff.
	EventConsumerLost
	// EventBackoff: Consume waits Delay before attempt number Attempt to
	// re-attach to Address; Err is the failure that caused it.
	EventBackoff
	// EventSenderAttached: a publisher's or a consumer's dead-letter sender
	// attached to Address for the first time.
	EventSenderAttached
	// EventSenderReattached: such a sender attached again after its link or
	// connection was lost.
	EventSenderReattached
	// EventPublishRetried: a publish to Address whose outcome was unknown
	// (Err) is sent again on a new link; it carries a duplicate id, so
	// Artemis stores it once.
	EventPublishRetried
)

// String names the event kind.
func (k ConnectionEventKind) String() string {
	switch k {
	case EventConnected:
		return "connected"
	case EventReconnected:
		return "reconnected"
	case EventDisconnected:
		return "disconnected"
	case EventDialFailed:
		return "dial_failed"
	case EventConsumerAttached:
		return "consumer_attached"
	case EventConsumerResumed:
		return "consumer_resumed"
	case EventConsumerLost:
		return "consumer_lost"
	case EventBackoff:
		return "backoff"
	case EventSenderAttached:
		return "sender_attached"
	case EventSenderReattached:
		return "sender_reattached"
	case EventPublishRetried:
		return "publish_retried"
	}
	return fmt.Sprintf("ConnectionEventKind(%d)", int(k))
}

// ConnectionEvent is one loss or recovery the Client reports.
type ConnectionEvent struct {
	// Kind says what happened.
	Kind ConnectionEventKind
	// URL is the broker URL concerned, its password replaced by xxxxx ("" when unknown).
	URL string
	// Address is the queue (or dead-letter queue) of a link event.
	Address string
	// Attempt numbers a Consume re-attach attempt (EventBackoff), from 1.
	Attempt int
	// Delay is the wait before that attempt (EventBackoff).
	Delay time.Duration
	// Err is the cause of a loss or failure, passwords scrubbed.
	Err error
}

// Client owns one AMQP connection and session to Artemis, re-dialing them
// when they are lost, and hands out publishers (Client.Publisher) and a
// supervised consume loop (Client.Consume) that survive the loss. It is
// optional: Publisher and Consumer work on any go-amqp link you manage.
// A Client is safe for concurrent use.
type Client struct {
	brokers     []broker
	dialTimeout time.Duration
	backoff     Backoff
	onEvent     func(ConnectionEvent)
	logger      *slog.Logger
	red         redactor

	// seams: the real values come from Dial, tests put fakes here.
	dial   dialFunc
	random func() float64
	after  func(time.Duration) <-chan time.Time
	now    func() time.Time
	joined func() // hears of a caller waiting for another's dial

	done chan struct{} // closed by Close

	mu        sync.Mutex
	closed    bool
	cur       *connection
	next      int  // index of the broker URL to try first
	connected bool // a connection was opened before: the next one is a reconnect
	dialing   *dialCall
}

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

// Dial connects to the first of urls that answers, trying them in turn (an
// Artemis live/backup pair, for instance), and returns a Client that owns
// the connection. opts may be nil. The URLs are amqp:// or amqps://, with
// optional userinfo credentials. An error never shows a password: each URL
// is printed with its password replaced by xxxxx, and a password quoted by
// go-amqp or the net package is scrubbed. When no URL answers the error
// matches ErrConnect.
func Dial(ctx context.Context, urls []string, opts *ClientOptions) (*Client, error) {
	c, err := newClient(urls, opts, dialAMQP)
	if err != nil {
		return nil, err
	}
	if _, err := c.connection(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

func newClient(urls []string, opts *ClientOptions, dial dialFunc) (*Client, error) {
	var o ClientOptions
	if opts != nil {
		o = *opts
	}
	c := &Client{
		dialTimeout: o.DialTimeout,
		backoff:     DefaultBackoff(),
		onEvent:     o.OnEvent,
		logger:      o.Logger,
		dial:        dial,
		random:      rand.Float64,
		after:       time.After,
		now:         time.Now,
		done:        make(chan struct{}),
	}
	c.red.add(o.Password)
	for _, raw := range urls {
		c.red.addURLPassword(raw)
	}
	if len(urls) == 0 {
		return nil, fmt.Errorf("%w: no broker URL", ErrInvalidConfig)
	}
	for _, raw := range urls {
		b, err := parseBroker(raw, &o)
		if err != nil {
			return nil, c.red.error(err)
		}
		b.shown = c.red.string(b.shown)
		c.brokers = append(c.brokers, b)
	}
	if c.dialTimeout == 0 {
		c.dialTimeout = DefaultDialTimeout
	}
	if c.dialTimeout < 0 {
		return nil, fmt.Errorf("%w: dial timeout is %v, want > 0", ErrInvalidConfig, c.dialTimeout)
	}
	if o.Backoff != nil {
		if err := o.Backoff.Validate(); err != nil {
			return nil, err
		}
		c.backoff = *o.Backoff
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	base := amqp.ConnOptions{}
	if o.ConnOptions != nil {
		base = *o.ConnOptions
	}
	if o.TLSConfig != nil {
		base.TLSConfig = o.TLSConfig
	}
	for i := range c.brokers {
		c.brokers[i].opts = base
	}
	return c, nil
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

// Close closes the connection and every link on it. Consume loops return
// ErrClosed and publishes fail with ErrClosed. Cancel Consume's context
// first for a graceful stop that lets handlers in flight settle.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.done)
	cn := c.cur
	c.cur = nil
	c.mu.Unlock()
	if cn == nil {
		return nil
	}
	if cn.dead() {
		// Its error was reported when it died; Close would only repeat it.
		_ = cn.conn.Close()
		return nil
	}
	return c.red.error(cn.conn.Close())
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
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

// emit reports an event to the callback and the logger, scrubbed.
func (c *Client) emit(ev ConnectionEvent) {
	ev.URL = c.red.string(ev.URL)
	ev.Err = c.red.error(ev.Err)
	c.log(ev)
	if c.onEvent == nil {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			c.logger.LogAttrs(context.Background(), slog.LevelError, "babelqueue: connection event callback panicked",
				slog.String("panic", c.red.string(fmt.Sprint(p))))
		}
	}()
	c.onEvent(ev)
}

func (c *Client) log(ev ConnectionEvent) {
	level := slog.LevelInfo
	switch ev.Kind {
	case EventDisconnected, EventDialFailed, EventConsumerLost, EventPublishRetried:
		level = slog.LevelWarn
	case EventBackoff:
		level = slog.LevelDebug
	}
	ctx := context.Background()
	if !c.logger.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 6)
	attrs = append(attrs, slog.String("event", ev.Kind.String()))
	if ev.URL != "" {
		attrs = append(attrs, slog.String("url", ev.URL))
	}
	if ev.Address != "" {
		attrs = append(attrs, slog.String("address", ev.Address))
	}
	if ev.Kind == EventBackoff {
		attrs = append(attrs, slog.Int("attempt", ev.Attempt), slog.Duration("delay", ev.Delay))
	}
	if ev.Err != nil {
		attrs = append(attrs, slog.String("error", ev.Err.Error()))
	}
	c.logger.LogAttrs(ctx, level, "babelqueue: "+strings.ReplaceAll(ev.Kind.String(), "_", " "), attrs...)
}

// urlError is the failure of one broker URL.
type urlError struct {
	url string
	err error
}

func (e *urlError) Error() string { return e.url + ": " + e.err.Error() }
func (e *urlError) Unwrap() error { return e.err }

// connectError is the failure of every broker URL. It matches ErrConnect.
type connectError struct {
	errs []error
}

func (e *connectError) Error() string {
	var b strings.Builder
	b.WriteString(ErrConnect.Error())
	for i, err := range e.errs {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(err.Error())
	}
	return b.String()
}

func (e *connectError) Is(target error) bool { return target == ErrConnect }
func (e *connectError) Unwrap() []error      { return e.errs }

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
