package artemis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/google/uuid"
)

// MinCredit is the smallest default receiver credit Consume grants: the
// window at which eight workers get what the broker gives (rhea's default
// window too). docs/consuming.md says what it bounds.
const MinCredit = 100

// defaultCredit is the link credit Consume grants a Consumer with
// concurrency workers without WithCredit.
func defaultCredit(concurrency int) int { return max(2*concurrency, MinCredit) }

// source is what a consume loop's receiver asks of the broker besides the
// queue: the "topic" capability of a subscription (Subscribe), the
// selector (WithSelector and WithOnlyHandledURNs, composed and checked; ""
// for none), and for a non-durable subscription the address the receiver
// attaches to and the subscription name its link is named after.
type source struct {
	topic    bool
	selector string
	volatile *volatileSub // nil: a queue or a durable subscription
}

// volatileSub is a non-durable subscription (WithNonDurable):
// a receiver on the topic itself, as a JMS shared non-durable subscriber
// attaches over AMQP: the capabilities topic, shared and global, no
// terminus durability, expiry at the link's detach, and a link name that
// starts with the subscription's name. Artemis 2.40 makes of it a shared,
// non-durable multicast queue named <name>:shared-volatile:global on the
// topic (global: the name does not depend on the connection's container
// id, so every instance shares it), and deletes the queue when its last
// consumer detaches. Each link's name is <name>|<unique suffix>: link names
// on a connection are distinct, and Artemis reads the subscription's name
// up to the "|".
type volatileSub struct {
	topic string
	name  string
}

// queue is the subscription queue's name on the broker.
func (v *volatileSub) queue() string { return v.name + ":shared-volatile:global" }

func (v *volatileSub) receiverOptions(o *amqp.ReceiverOptions) {
	o.Name = v.name + "|" + uuid.NewString()
	o.SourceCapabilities = []string{"topic", "shared", "global"}
	o.Durability = amqp.DurabilityNone
	o.ExpiryPolicy = amqp.ExpiryPolicyLinkDetach
}

// address is where the receiver attaches: the topic for a non-durable
// subscription, queue otherwise.
func (s source) address(queue string) string {
	if s.volatile != nil {
		return s.volatile.topic
	}
	return queue
}

// check refuses what a source cannot take: WithNonDurable outside Subscribe,
// and a scheduled retry (a schedule, or a retry sender of the user's own)
// on a non-durable subscription (a copy scheduled on
// its queue could outlive it, and sent once the queue is gone, Artemis
// would create a durable queue of that name for it).
func (s source) check(o consumeOptions, cons *Consumer) error {
	switch {
	case o.nonDurable && s.volatile == nil:
		return fmt.Errorf("%w: WithNonDurable is for Client.Subscribe: a queue is durable or not by the broker's configuration", ErrInvalidConfig)
	case s.volatile != nil && (cons.scheduleSet && cons.schedule != nil || cons.retrySender != nil):
		return fmt.Errorf("%w: a non-durable subscription retries at once: a retry scheduled on its queue could outlive it (drop WithRetrySchedule/WithRetryBackoff/WithRetrySender, or subscribe durably)", ErrInvalidConfig)
	}
	return nil
}

// consume is Consume on one broker, cons and o validated and credit
// settled.
func (c *brokerClient) consume(ctx context.Context, queue string, src source, cons *Consumer, o consumeOptions, credit int32) error {
	// The Consumer is immutable; give this loop its own copy wired to the
	// Client's dead-letter sender. (Consumer holds no locks, so a copy is a
	// faithful one.)
	run := *cons
	if run.queue == "" || src.topic {
		// A subscription's name is always its address::queue: that is
		// where a dead letter's redrive must go.
		run.queue = queue
	}
	if src.volatile != nil {
		// Its retries are the broker's immediate redeliveries: a copy
		// scheduled on the queue could outlive it (consumeOn refused an
		// explicit schedule).
		run.schedule = nil
	}
	var dlq *clientSender
	if run.dlq == nil && !o.noDeadLetter {
		dlq = c.newSender(dlqAddress(run.queue))
		run.dlq = dlq
	}

	var retry *clientSender
	if run.retrySender == nil && run.schedule != nil {
		// Scheduled retry copies go back to the queue on this broker: on a
		// cluster, to the member the message came from.
		retry = c.newSender(queue)
		run.retrySender = retry
	}

	l := &consumeLoop{c: c, queue: queue, cons: &run, dlq: dlq, retry: retry, credit: credit, creditBytes: o.creditBudget(), src: src}
	err := l.run(ctx)
	l.detach(ctx)
	return err
}

type consumeLoop struct {
	c      *brokerClient
	queue  string
	cons   *Consumer
	dlq    *clientSender
	retry  *clientSender
	credit int32
	// creditBytes is the link's byte budget (see creditWindow): 0 leaves
	// the credit to go-amqp, granted again as deliveries are settled.
	creditBytes int64

	src source

	attachedBefore bool
	last           linkReceiver // the receiver attached when ctx ended, detached on the way out
}

func (l *consumeLoop) run(ctx context.Context) error {
	failures := 0
	for {
		if l.c.isClosed() {
			return ErrClosed
		}
		if ctx.Err() != nil {
			return nil
		}
		a, err := l.attachment(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errSelectorRefused) {
			return err // no attach will take it: fail at once
		}
		if l.c.isClosed() {
			return ErrClosed
		}
		if a.handled || a.uptime >= l.c.backoff.Max {
			// It attached again and got a message through: the failures
			// before are over.
			failures = 0
		}
		var redialled <-chan struct{}
		if a.cn != nil && (a.cn.dead() || a.cn.lost.Err() != nil) { // dead, or dropped by the Client
			redialled = a.cn.replaced
			select {
			case <-redialled:
				// Another part of the Client has already re-dialled: no
				// backoff for a connection that is back.
				continue
			default:
			}
		}
		delay := l.c.backoff.Delay(failures, l.c.random())
		failures++
		l.c.emit(ConnectionEvent{Kind: EventBackoff, Address: l.queue, Attempt: failures, Delay: delay, Err: err})
		if !l.c.sleep(ctx, delay, redialled) {
			if l.c.isClosed() {
				return ErrClosed
			}
			return nil
		}
	}
}

// attached is what one attachment came to.
type attached struct {
	cn      *connection   // the connection it used (nil when there was none)
	uptime  time.Duration // how long Listen ran (-1 when it never did)
	handled bool          // a delivery was settled on it
}

// attachment attaches, listens until the link fails or ctx ends, and says
// how it went and why it ended.
func (l *consumeLoop) attachment(ctx context.Context) (attached, error) {
	a := attached{uptime: -1}
	cn, err := l.c.awaitConnection(ctx)
	if err != nil {
		return a, err
	}
	a.cn = cn
	actx, cancel := context.WithTimeout(ctx, l.c.dialTimeout)
	opts := receiverOptions(l.credit, l.src)
	if l.creditBytes > 0 {
		opts.Credit = -1 // granted by hand: see creditWindow
	}
	lr, err := cn.sess.NewReceiver(actx, l.src.address(l.queue), opts)
	cancel()
	if err != nil {
		if filterMismatch(err) {
			// Artemis closes the connection with this answer.
			l.c.linkFailed(cn, err)
			return a, fmt.Errorf("%w: %s exists with another selector than %q (delete the subscription queue or subscribe under a new name): %w", errSelectorRefused, l.queue, l.src.selector, l.c.red.error(err))
		}
		if refusedSelector(err, l.src.selector) {
			return a, fmt.Errorf("%w %q on %s: %w", errSelectorRefused, l.src.selector, l.queue, l.c.red.error(err))
		}
		l.c.linkFailed(cn, err)
		return a, fmt.Errorf("attach receiver to %s: %w", l.queue, l.c.red.error(err))
	}
	r := &countingReceiver{linkReceiver: lr}
	if l.creditBytes > 0 {
		if r.w, err = l.windowed(ctx, lr); err != nil {
			l.c.linkFailed(cn, err)
			return a, err
		}
	}
	if l.dlq != nil && l.src.volatile == nil {
		// Attached now, not on the first dead-letter write, so a refused
		// dead-letter address is seen at once (and Artemis creates it).
		// Not for a non-durable subscription, which leaves nothing behind
		// unless it dead-letters.
		if _, err := l.dlq.link(ctx, true); err != nil {
			l.closeReceiver(ctx, r)
			return a, err
		}
	}
	kind := EventConsumerAttached
	if l.attachedBefore {
		kind = EventConsumerResumed
	}
	l.attachedBefore = true
	l.c.emit(ConnectionEvent{Kind: kind, URL: cn.url, Address: l.queue})

	start := l.c.now()
	err = l.cons.listen(ctx, r, cn.lost)
	a.uptime = l.c.now().Sub(start)
	a.handled = r.settled.Load()
	if ctx.Err() != nil {
		// Deliveries pushed ahead on credit that Listen never took go back
		// with the link: Artemis returns them uncounted on a clean detach.
		// Consume detaches it on its way out (detach).
		l.last = r
		return a, nil
	}
	l.c.linkFailed(cn, err)
	l.closeReceiver(ctx, r)
	if !l.c.isClosed() {
		l.c.emit(ConnectionEvent{Kind: EventConsumerLost, URL: cn.url, Address: l.queue, Err: err})
	}
	return a, err
}

// windowed gives lr, attached with manual credit, a creditWindow of the
// loop's credit and byte budget, and grants its first credit. A link that
// cannot be given credit by hand (a test's fake) gets none (nil) and is
// used as it is.
func (l *consumeLoop) windowed(ctx context.Context, lr linkReceiver) (*creditWindow, error) {
	issuer, ok := lr.(interface{ IssueCredit(uint32) error })
	if !ok {
		return nil, nil
	}
	w := newCreditWindow(issuer.IssueCredit, int(l.credit), l.creditBytes)
	if err := w.start(); err != nil {
		l.closeReceiver(ctx, lr)
		return nil, fmt.Errorf("grant credit on %s: %w", l.queue, l.c.red.error(err))
	}
	return w, nil
}

// countingReceiver is the Client's consumer link as Listen sees it: it
// notes that a delivery was settled on the link, and, under a creditWindow
// (w, nil: none), accounts every delivery received and settled.
type countingReceiver struct {
	linkReceiver
	w       *creditWindow
	settled atomic.Bool
}

func (r *countingReceiver) Receive(ctx context.Context, opts *amqp.ReceiveOptions) (*amqp.Message, error) {
	msg, err := r.linkReceiver.Receive(ctx, opts)
	if r.w != nil && err == nil && msg != nil {
		r.w.received(msg)
	}
	return msg, err
}

// note accounts a settlement of msg whose disposition returned err.
func (r *countingReceiver) note(msg *amqp.Message, err error) error {
	if r.w != nil {
		r.w.settled(msg)
	}
	if err == nil && !r.settled.Load() {
		// Written once: a store on every settlement would take the cache
		// line from the other workers each time.
		r.settled.Store(true)
	}
	return err
}

func (r *countingReceiver) AcceptMessage(ctx context.Context, msg *amqp.Message) error {
	return r.note(msg, r.linkReceiver.AcceptMessage(ctx, msg))
}

func (r *countingReceiver) ReleaseMessage(ctx context.Context, msg *amqp.Message) error {
	return r.note(msg, r.linkReceiver.ReleaseMessage(ctx, msg))
}

func (r *countingReceiver) ModifyMessage(ctx context.Context, msg *amqp.Message, opts *amqp.ModifyMessageOptions) error {
	return r.note(msg, r.linkReceiver.ModifyMessage(ctx, msg, opts))
}

// Address is the receiver's source address, when its link knows it.
func (r *countingReceiver) Address() string {
	if a, ok := r.linkReceiver.(interface{ Address() string }); ok {
		return a.Address()
	}
	return ""
}

// closeReceiver detaches a failed receiver, bounded by ctx (Consume's) and
// the dial timeout.
func (l *consumeLoop) closeReceiver(ctx context.Context, r linkReceiver) {
	cctx, cancel := context.WithTimeout(ctx, l.c.dialTimeout)
	defer cancel()
	_ = r.Close(cctx)
}

// detach closes the last receiver, the dead-letter and the retry senders as Consume
// returns, side by side, each bounded by closeGrace.
func (l *consumeLoop) detach(ctx context.Context) {
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.c.closeGrace)
	defer cancel()
	var wg sync.WaitGroup
	if r := l.last; r != nil {
		wg.Go(func() { _ = r.Close(gctx) })
	}
	if l.dlq != nil {
		wg.Go(func() { _ = l.dlq.close(gctx) })
	}
	if l.retry != nil {
		wg.Go(func() { _ = l.retry.close(gctx) })
	}
	wg.Wait()
}

// receiverOptions attach with the "queue" capability (the "topic" one for
// a subscription) and the selector as the source's filter, and ask the
// broker to send unsettled, so no delivery is settled before the consumer
// decides.
func receiverOptions(credit int32, src source) *amqp.ReceiverOptions {
	mode := amqp.SenderSettleModeUnsettled
	o := &amqp.ReceiverOptions{
		SourceCapabilities:        []string{capability(src.topic)},
		Credit:                    credit,
		RequestedSenderSettleMode: &mode,
	}
	if src.selector != "" {
		o.Filters = []amqp.LinkFilter{amqp.NewSelectorFilter(src.selector)}
	}
	if v := src.volatile; v != nil {
		v.receiverOptions(o)
	}
	return o
}
