// The Client's entries, where a user's call comes in: Dial and DialCluster
// build a Client over its backend, one broker's (brokerClient, the files
// below client_cluster.go) or a cluster's (clusterClient,
// client_cluster.go); Publisher, Consume, Status and Close check the call
// and hand it to the backend.

package artemis

import (
	"context"
	"fmt"
	"math"
	"strings"
)

// Dial connects to the first of urls that answers, trying them in turn (an
// Artemis live/backup pair, for instance), and returns a Client that owns
// the connection. opts may be nil. The URLs are amqp:// or amqps://, with
// optional userinfo credentials. An error never shows a password: each URL
// is printed with its password replaced by xxxxx, and a password quoted by
// go-amqp or the net package is scrubbed. When no URL answers the error
// matches ErrConnect. A connection router's answer, amqp:connection:redirect
// (an Artemis acceptor with router=), is followed: the Client connects to
// the host and port it names, with the same credentials, at most 3 hops. For
// a cluster of several live brokers see DialCluster.
func Dial(ctx context.Context, urls []string, opts *ClientOptions) (*Client, error) {
	b, err := newClient(urls, opts, dialAMQP)
	if err != nil {
		return nil, err
	}
	c := clientOver(b)
	if _, err := b.connection(ctx); err != nil {
		_ = c.closeNow()
		return nil, err
	}
	return c, nil
}

// DialCluster connects to the members of an Artemis cluster and returns a
// Client over all of them. Each element of nodes is one member's URL list,
// as Dial takes it: its live URL, then its backups, tried in turn. An AMQP
// client learns no topology from Artemis, so every member must be listed.
// opts (nil for the defaults) apply to every member.
//
// Every member is dialled at once; DialCluster returns when each has
// answered or failed, and fails (matching ErrConnect) only when none could
// be connected to. A member that is down is dialled again whenever it is
// needed, on its own, while the others go on.
//
// The Client has the methods of Dial's, and:
//
//   - Publisher: a message that carries a group-id (WithGroupID) or a
//     duplicate id (WithDuplicateDetection) always goes to the member its
//     key hashes to (the group-id, else the duplicate id), so per-group
//     order and duplicate detection, both kept per member by Artemis, hold;
//     the retry after an ambiguous outcome goes to the same member. When
//     that member is down the publish waits for it within its context
//     (FailFast: fails at once), unless ClientOptions.ClusterFailover sends
//     it to the next member with weaker guarantees. Other messages go round
//     robin over the members that are connected, skipping one that cannot
//     be connected to. PublishWithReceipt's receipts resolve per member: a
//     member that stops settling or is lost delays only its own receipts.
//   - Consume: runs the Consumer on every member at once (a receiver per
//     member, each with the Consumer's concurrency and credit), so no
//     message waits on a member without a consumer. Per-group order holds
//     as on one broker, because a group's messages are all on one member
//     (Artemis never redistributes a message with a group-id). The loops
//     share a memory of failed attempts by meta.id, so a message that
//     redistribution moves to another member (Artemis restarts its
//     delivery-count there) goes on counting: it gets at most maxTries
//     handler calls from this Client wherever it moves (while fewer than
//     65,536 failing messages wait for a retry at once). A member
//     that is lost is re-dialled and re-attached on its own. It returns
//     when ctx ends (nil), the Client is closed (ErrClosed), or a member's
//     loop fails for good (its error; the others are then stopped).
//   - Status: Members reports each member.
//   - Close: closes every member.
func DialCluster(ctx context.Context, nodes [][]string, opts *ClientOptions) (*Client, error) {
	cl, err := newCluster(nodes, opts, dialAMQP)
	if err != nil {
		return nil, err
	}
	c := clientOver(cl)
	if err := cl.dialMembers(ctx); err != nil {
		_ = c.closeNow()
		return nil, err
	}
	return c, nil
}

// Client owns the connections to Artemis (one broker's, from Dial, or a
// cluster's members', from DialCluster), re-dialing them when they are
// lost, and hands out publishers (Client.Publisher) and a supervised
// consume loop (Client.Consume) that survive the loss. It is optional:
// Publisher and Consumer work on any go-amqp link you manage. A Client is
// safe for concurrent use.
type Client struct {
	be backend // nil in a zero Client: nothing was opened
}

// backend is what a Client runs on: one broker (brokerClient) or a
// cluster of them (clusterClient). The Client checks each call; the
// backend does it.
type backend interface {
	// publishSender attaches a reconnecting sender to queue (a topic's
	// multicast address when topic is set) for a Publisher.
	publishSender(ctx context.Context, queue string, topic bool) (publishLink, error)
	// consume runs Consume (or Subscribe) with cons and o validated and
	// credit settled.
	consume(ctx context.Context, queue string, src source, cons *Consumer, o consumeOptions, credit int32) error
	// status is Status (ClientStatus.Members set by a cluster).
	status() ClientStatus
	// closeWithin is Close: it marks the backend closed at once (every
	// later call fails with ErrClosed) and waits for the connections'
	// teardown until ctx ends; later calls return nil.
	closeWithin(ctx context.Context) error
}

var (
	_ backend = (*brokerClient)(nil)
	_ backend = (*clusterClient)(nil)
)

// clientOver is the user's Client over be.
func clientOver(be backend) *Client { return &Client{be: be} }

// Publisher attaches a sender to queue with the "queue" capability (an
// anycast queue on Artemis) and returns a publisher over it. opts apply to
// every publish, before per-call options; pass WithDuplicateDetection to
// make ambiguous failures retryable (below). The attach happens now, so an
// unreachable broker or a refused address is reported here.
//
// When is a failed publish retried? Publish returns meta.id only once the
// broker accepted the transfer. When the link is known to be gone before
// the transfer is written (the connection died while idle), the publisher
// re-dials and sends on the new link: nothing was sent, so nothing can be
// doubled. When the link or connection fails after the transfer may have
// been written, or ctx ends while waiting for the broker's outcome, the
// outcome is unknown: the broker may have stored the message. Sending it
// again is duplicate-free only with Artemis duplicate detection, so:
//
//   - without WithDuplicateDetection the error is returned, matching
//     ErrOutcomeUnknown, and nothing is retried: the caller decides;
//   - with it, the message (same meta.id, same _AMQ_DUPL_ID) is sent once
//     more on a re-dialed link, and Artemis drops it if the first copy was
//     stored. A second unknown outcome is returned as ErrOutcomeUnknown.
//     An ended ctx is never retried.
//
// When no broker answers, the error matches ErrConnect: nothing was sent,
// and publishing again is safe. A caller retrying an unknown outcome on its
// own must resend the same envelope (Publish of the *Envelope with
// WithDuplicateDetection) for Artemis to recognise it: a Job mints a new
// meta.id each publish. A rejected, released or modified outcome is the
// broker's answer, returned as an *OutcomeError and never retried.
//
// PublishWithReceipt pipelines over the current link (go-amqp's
// SendWithReceipt), and the same rules hold for each receipt: a receipt
// outstanding when the link or connection drops resolves to an error
// matching ErrOutcomeUnknown, or, with WithDuplicateDetection, its message
// is sent once more on a re-dialed link and the receipt resolves as accepted
// when the broker accepts that copy, else still to ErrOutcomeUnknown (the
// first copy may be stored, whatever became of the second). Those resends run one by one on the resolving goroutine of the
// link the receipts were written on, each bounded by twice the Client's
// DialTimeout; each link's receipts resolve on their own, so on a cluster
// a member that stops settling (or is lost) never delays the outcomes of
// another member's receipts. A receipt
// whose outcome has not come within twice the DialTimeout of its write is
// handled the same way (ErrOutcomeUnknown, or one resend with
// WithDuplicateDetection), and counts toward ClientOptions.OutcomeTimeouts
// as a Publish ended by its ctx does: a broker that keeps the connection
// alive but stops settling is re-dialled, and no receipt stays pending
// for ever.
func (c *Client) Publisher(ctx context.Context, queue string, opts ...PublishOption) (*ClientPublisher, error) {
	return c.publisher(ctx, queue, false, opts)
}

// publisher is Publisher, to a topic's multicast address when topic is set
// (TopicPublisher).
func (c *Client) publisher(ctx context.Context, queue string, topic bool, opts []PublishOption) (*ClientPublisher, error) {
	if c.be == nil {
		return nil, errNotBuilt
	}
	what := "queue"
	if topic {
		what = "topic"
	}
	if strings.TrimSpace(queue) == "" {
		return nil, fmt.Errorf("%w: the %s name is blank", ErrInvalidConfig, what)
	}
	s, err := c.be.publishSender(ctx, queue, topic)
	if err != nil {
		return nil, err
	}
	return &ClientPublisher{Publisher: NewPublisher(s, queue, opts...), link: s}, nil
}

// ClientPublisher is a Publisher whose link the Client keeps attached: after
// the link or the connection is lost, the next publish re-dials and
// re-attaches, without the caller rebuilding anything. Publish and
// PublishWithReceipt come from the embedded Publisher.
type ClientPublisher struct {
	*Publisher
	link publishLink // one broker's reconnecting sender, or a cluster's
}

// Close detaches the publisher's link. Later publishes fail with ErrClosed.
// The Client's connection stays open. ctx bounds the wait for the detach:
// when it ends first (or was done already), Close returns its error at
// once; the publisher is closed all the same, and the detach finishes on
// its own, within the dial timeout.
func (p *ClientPublisher) Close(ctx context.Context) error {
	if p.link == nil {
		return errNotBuilt
	}
	return p.link.close(ctx)
}

// Consume runs cons on queue under supervision until ctx ends, then
// returns nil (ErrClosed when the Client is closed first). It attaches a
// receiver to queue with the "queue" capability, asking the broker to send
// unsettled (cons settles every delivery itself), and, unless cons has its
// own dead-letter sender, a sender with the "queue" capability to
// <name>.dlq (name: cons's WithQueue, else queue) that cons dead-letters
// through, and, unless cons has its own retry sender or retries at once
// (WithRetrySchedule(nil)), a sender to queue for the scheduled retry
// copies, attached at the first one; then it runs cons.Listen. When the link or the connection drops
// it reports the loss (ClientOptions.OnEvent and Logger), waits a capped
// exponential backoff with jitter (ClientOptions.Backoff), re-dials if the
// connection is gone, re-attaches and resumes Listen, for as long as ctx
// lasts. The wait grows with each failed attempt and starts over once an
// attachment has settled a delivery (or stayed up for Backoff.Max). A
// wait after the connection was lost ends as soon as the Client has a new
// one (re-dialled for a publisher, say), and is skipped when it already
// has.
//
// cons is not modified: Consume listens with a copy that has the
// dead-letter sender and, when WithQueue was not given, queue as its queue
// name. An invalid cons or opts is returned at once, matching
// ErrInvalidConfig. On ctx's end, handlers in flight finish and settle
// before Consume returns; then the receiver and the dead-letter sender are
// detached side by side, each given at most 2 s, so an unresponsive
// network does not hold Consume longer. A failed link's detach is bounded
// by ctx and the dial timeout. With WithMaxMessages or WithStopWhenIdle,
// Consume also returns nil once that limit is reached, as on ctx's end.
// Credit, selector and dead-letter sender are the Consumer's options too
// (WithCredit, WithSelector, WithOnlyHandledURNs, WithoutDeadLetter).
func (c *Client) Consume(ctx context.Context, queue string, cons *Consumer) error {
	if c.be == nil {
		return errNotBuilt
	}
	if strings.TrimSpace(queue) == "" {
		return fmt.Errorf("%w: the queue name is blank", ErrInvalidConfig)
	}
	return c.consumeOn(ctx, queue, source{}, cons)
}

// consumeOn is Consume on queue, a subscription's address::queue when
// src.topic is set (Subscribe); queue was checked.
func (c *Client) consumeOn(ctx context.Context, queue string, src source, cons *Consumer) error {
	if cons == nil {
		return fmt.Errorf("%w: the consumer is nil", ErrInvalidConfig)
	}
	if cons.err != nil {
		return cons.err
	}
	o := cons.run
	if err := src.check(o, cons); err != nil {
		return err
	}
	sel, err := composeSelector(o.selector, o.onlyHandled, cons.handlers)
	if err != nil {
		return err
	}
	src.selector = sel
	if cons.dlq == nil && !o.noDeadLetter {
		// The queue name the Client's dead-letter sender is named after.
		name := queue
		if cons.queue != "" && !src.topic {
			name = cons.queue
		}
		if err := checkDLQName(name); err != nil {
			return err
		}
	}
	credit := o.credit
	if credit == 0 {
		credit = defaultCredit(cons.concurrency)
	}
	credit = min(credit, math.MaxInt32)
	if o.maxMessages > 0 || o.stopWhenIdle > 0 {
		// A bounded Consume: the limit ends this context when reached.
		var end context.CancelFunc
		ctx, end = context.WithCancel(ctx)
		defer end()
		bounded := *cons
		bounded.limit = newConsumeLimit(o.maxMessages, o.stopWhenIdle, end)
		cons = &bounded
		if o.maxMessages > 0 {
			credit = min(credit, o.maxMessages)
		}
	}
	return c.be.consume(ctx, queue, src, cons, o, int32(credit))
}

// Status reports whether the Client is connected right now, to which URL,
// since when, and its last connection error. It never blocks on the
// network and is safe to call from any goroutine, as often as a probe
// likes. A connection that died but whose loss was not noticed yet counts
// as not connected.
func (c *Client) Status() ClientStatus {
	if c == nil {
		return ClientStatus{LastError: errNotBuilt}
	}
	if c.be == nil {
		return ClientStatus{} // a zero Client: never connected, nothing failed
	}
	return c.be.status()
}

// Close closes the connection and every link on it, and cuts short a dial
// in flight or a backoff wait between dials: Consume loops return
// ErrClosed, and publishes fail with ErrClosed (those that were waiting
// for the connection with an error that matches both ErrConnect and
// ErrClosed). It waits for no dial. Cancel Consume's context first for a
// graceful stop that lets handlers in flight settle.
//
// ctx bounds the wait for the connection's close handshake: when it ends
// first (or was done already), Close returns its error at once; the Client
// is closed all the same (every call fails with ErrClosed), and the
// connection's teardown finishes on its own.
func (c *Client) Close(ctx context.Context) error {
	if c == nil || c.be == nil {
		return nil // a nil or zero Client: nothing was opened
	}
	return c.be.closeWithin(ctx)
}

// closeNow is Close, waiting for the teardown.
func (c *Client) closeNow() error { return c.be.closeWithin(context.Background()) }
