// The Client's configuration and state: ClientOptions and its defaults, the
// client of one broker they build (newClient: a Client from Dial, or one
// member of a cluster's), and the health it keeps for Status.

package artemis

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/Azure/go-amqp"
)

// DefaultDialTimeout bounds one connection attempt to one broker URL (TCP,
// TLS, SASL, AMQP open and begin) and one link attach.
const DefaultDialTimeout = 15 * time.Second

// DefaultIdleTimeout is the go-amqp idle timeout the Client sets unless
// ConnOptions says otherwise: a connection on which nothing arrives for this
// long is failed and re-dialed, so a half-open network (no FIN, no RST) is
// noticed within it. go-amqp advertises half of it to the broker, and
// Artemis sends an empty frame at half of what was advertised, so an idle
// but healthy connection carries a heartbeat every 2.5 s.
const DefaultIdleTimeout = 10 * time.Second

// DefaultOutcomeTimeouts is the number of outcome timeouts in a row that
// declare a connection dead (ClientOptions.OutcomeTimeouts).
const DefaultOutcomeTimeouts = 3

// minOutcomeWait is how long a transfer must have waited for its outcome
// for its timeout to count toward ClientOptions.OutcomeTimeouts.
const minOutcomeWait = time.Second

// ClientOptions configures a Client. The zero value (or nil) is usable:
// credentials from the URLs' userinfo, no events, no logging.
type ClientOptions struct {
	// Username and Password are SASL PLAIN credentials for every URL, taken
	// field by field: a field set here replaces that field of each URL's
	// userinfo (amqp://user:pass@host:5672), and only that one, so
	// Username "svc" with amqp://u:p@host dials as svc with password p.
	// An empty field leaves the URL's. When neither the options nor a URL
	// give a user or a password, the SASLType of ConnOptions applies
	// (go-amqp's default: no SASL).
	//
	// A URL's userinfo must be percent-encoded: a password with "@", "/",
	// "?", "#" or "%" written raw makes the URL read part of it as the host
	// or the path (amqp://u:P@ss/w@host is host "ss"), and Dial refuses
	// such a URL (an "@" after its userinfo) with ErrInvalidConfig rather
	// than dial it. Write P@ss/w as P%40ss%2Fw, or pass it in Password.
	// Every error, event and log line masks the password, and the whole
	// userinfo of a URL that is refused or does not parse.
	// Default: the URLs' own.
	Username string
	// Password is the SASL PLAIN password, taken as Username is (above).
	// Default: the URLs' own.
	Password string

	// TLSConfig is used for amqps:// URLs (direct TLS, what an Artemis
	// acceptor with sslEnabled=true speaks). go-amqp clones it per
	// connection and sets ServerName to the URL's host when it is empty.
	// Default: ConnOptions.TLSConfig, else go-amqp's (the system roots).
	TLSConfig *tls.Config

	// ConnOptions are the base go-amqp connection options (idle timeout,
	// container id, frame size ...). SASLType and TLSConfig are replaced by
	// the fields above when those are set; leave HostName empty when there
	// is more than one URL. An IdleTimeout of 0 becomes DefaultIdleTimeout
	// (go-amqp's own default is a minute); a negative one turns the idle
	// check off, as in go-amqp. Default: go-amqp's, with an IdleTimeout of
	// DefaultIdleTimeout (10s).
	ConnOptions *amqp.ConnOptions

	// DialTimeout bounds each connection attempt to one URL and each link
	// attach. Default: DefaultDialTimeout (15s).
	DialTimeout time.Duration

	// Backoff paces the Client's re-dials and Consume's re-attach attempts.
	// After a loss the Client re-dials at once;
	// after each failed round over the URL list it waits the next backoff
	// step before dialing again. One re-dial runs at a time per Client,
	// shared by every publisher and consume loop, so an outage costs one
	// round of dials (and one round of log lines) per step, however many
	// goroutines are publishing. Default: DefaultBackoff().
	Backoff *Backoff

	// FailFast makes a publish (and a consume loop's dead-letter write) that
	// finds no connection fail at once with ErrConnect, without waiting for
	// the re-dial: during a backoff step it returns the last round's error
	// without dialing. Without it a publish waits for the connection to
	// come back, within the call's context: the publish returns ErrConnect
	// (nothing sent) only when its context ends, or the Client is closed,
	// first. Default: false.
	FailFast bool

	// OutcomeTimeouts is how many transfers in a row on one connection may
	// end by their context while waiting for the broker's outcome, with no
	// outcome received in between, before the Client declares the
	// connection dead, drops it and re-dials (the next URL first). Only
	// transfers that waited at least a second count: a context too
	// short for any broker says nothing about the connection. It catches a
	// half-open connection that still carries heartbeats; a negative value
	// turns the check off. Default: DefaultOutcomeTimeouts (3).
	OutcomeTimeouts int

	// OnEvent, when set, hears every connection and link event: each loss
	// and each recovery. It is called synchronously from the goroutine that
	// saw the event, possibly from several at once and possibly while a
	// publish or a re-dial waits on it, so it must be safe for concurrent
	// use, must not block and must not call back into the Client or its
	// publishers (hand the event to a channel or a goroutine for that). A
	// panic in it is recovered. The event's URL and Err never carry a
	// password. Default: none.
	OnEvent func(ConnectionEvent)

	// Logger receives the same events: losses and failures at warn,
	// recoveries at info, backoff waits at debug, each with a short fixed
	// message ("connection lost") and the event, url, address and error as
	// attributes. No password is ever logged. When Logger is nil and
	// OnEvent is nil too, the warn lines (losses and failures) go to
	// slog.Default(), so an outage is never silent; with OnEvent set and
	// no Logger, nothing is logged. A panic in OnEvent is logged at error,
	// to slog.Default() when Logger is nil. To log nothing at all, set
	// slog.New(slog.DiscardHandler). Default: nil (as above).
	Logger *slog.Logger

	// ClusterFailover (DialCluster only) lets a message that belongs to one
	// member (it has a group-id, or a duplicate id from
	// WithDuplicateDetection) go to the next member when its own cannot be
	// connected to, instead of waiting for it. The guarantees that pinning
	// gives are then weaker: per-group order holds only among the messages
	// that went to the same member, and a duplicate sent to two members is
	// stored twice. Without it the publish waits for the member within its
	// context (ClientOptions.FailFast: fails at once). Default: false.
	ClusterFailover bool
}

// brokerClient is the Client on one broker (the user's Client from Dial,
// and each member of DialCluster's): it owns one AMQP connection and
// session to Artemis, re-dialing them when they are lost, and gives the
// publishers their reconnecting senders and runs the supervised consume
// loops. It is safe for concurrent use.
type brokerClient struct {
	brokers         []broker
	dialTimeout     time.Duration
	backoff         Backoff
	failFast        bool
	outcomeTimeouts int
	onEvent         func(ConnectionEvent)
	logger          *slog.Logger
	red             redactor
	health          health // what Status reports

	// seams: the real values come from Dial, tests put fakes here.
	dial           dialFunc
	random         func() float64
	after          func(time.Duration) <-chan time.Time
	now            func() time.Time
	joined         func()        // hears of a caller waiting for another's dial
	minOutcomeWait time.Duration // minOutcomeWait; tests shorten it
	closeGrace     time.Duration // bounds Consume's detaches after its ctx ended

	done  chan struct{}   // closed by Close
	ctx   context.Context // ended by Close: every dial runs under it
	abort context.CancelFunc

	mu        sync.Mutex
	closed    bool
	cur       *connection
	last      *connection // the newest connection opened, dead or alive
	next      int         // index of the broker URL to try first
	connected bool        // a connection was opened before: the next one is a reconnect
	dialing   *dialCall
	failures  int        // dial rounds failed in a row
	pause     *dialPause // the backoff wait before the next dial round, if any
	lastErr   error      // why the last dial round failed
}

// newClient builds the Client on the broker of urls (one broker's live and
// backup URLs, tried in turn), dialling with dial, without dialling yet.
func newClient(urls []string, opts *ClientOptions, dial dialFunc) (*brokerClient, error) {
	var o ClientOptions
	if opts != nil {
		o = *opts
	}
	c := &brokerClient{
		dialTimeout:     o.DialTimeout,
		backoff:         DefaultBackoff(),
		failFast:        o.FailFast,
		outcomeTimeouts: o.OutcomeTimeouts,
		onEvent:         o.OnEvent,
		logger:          o.Logger,
		dial:            dial,
		random:          rand.Float64,
		after:           time.After,
		now:             time.Now,
		done:            make(chan struct{}),
		closeGrace:      closeGrace,
		minOutcomeWait:  minOutcomeWait,
	}
	c.ctx, c.abort = context.WithCancel(context.Background())
	if c.outcomeTimeouts == 0 {
		c.outcomeTimeouts = DefaultOutcomeTimeouts
	}
	c.red.add(o.Password)
	for _, raw := range urls {
		c.red.addURLPassword(raw)
	}
	if len(urls) == 0 {
		return nil, fmt.Errorf("%w: no broker URL", ErrInvalidConfig)
	}
	for _, raw := range urls {
		b, err := parseBroker(raw, o.Username, o.Password)
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
	base := amqp.ConnOptions{}
	if o.ConnOptions != nil {
		base = *o.ConnOptions
	}
	if o.TLSConfig != nil {
		base.TLSConfig = o.TLSConfig
	}
	if base.IdleTimeout == 0 {
		base.IdleTimeout = DefaultIdleTimeout
	}
	for i := range c.brokers {
		c.brokers[i].opts = base
	}
	return c, nil
}

func (c *brokerClient) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// closeGrace bounds each detach Consume makes once its context has ended
// (the receiver's and the dead-letter sender's, side by side), so a
// half-open network cannot hold Consume past it.
const closeGrace = 2 * time.Second

// health is what Status reports, kept up to date by every emitted event.
type health struct {
	mu        sync.Mutex
	connected bool
	url       string
	lastErr   error
	since     time.Time
}

// shut marks the Client closed, ends its context (cutting short a dial or a
// backoff wait) and takes its connection; first is false when it was
// closed already.
func (c *brokerClient) shut() (cn *connection, first bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, false
	}
	c.closed = true
	close(c.done)
	c.abort()
	cn = c.cur
	c.cur = nil
	return cn, true
}

// close is Close for a Client on one broker (a cluster's member),
// waiting for the teardown.
func (c *brokerClient) close() error { return c.closeWithin(context.Background()) }

// closeWithin marks the Client closed at once and waits for its
// connection's close handshake until ctx ends (the teardown goes on).
func (c *brokerClient) closeWithin(ctx context.Context) error {
	cn, first := c.shut()
	if !first || cn == nil {
		return nil
	}
	if cn.dead() {
		// Its error was reported when it died; Close would only repeat it.
		_ = cn.conn.Close()
		return nil
	}
	return waitFor(ctx, func() error { return c.red.error(cn.conn.Close()) })
}

// waitFor runs fn on a goroutine of its own and returns its error, or
// ctx's once ctx ends first (fn goes on). A ctx done already returns its
// error every time, not only when fn is still running.
func waitFor(ctx context.Context, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
