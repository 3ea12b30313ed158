package artemis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"
)

// MinCredit is the smallest default receiver credit Consume grants: the
// window at which eight workers get what the broker gives (rhea's default
// window too). docs/consuming.md says what it bounds.
const MinCredit = 100

// defaultCredit is the link credit Consume grants a Consumer with
// concurrency workers without WithCredit.
func defaultCredit(concurrency int) int { return max(2*concurrency, MinCredit) }

// The options below are a Consumer's (ConsumerOptions) that only
// Client.Consume and Client.Subscribe read: Listen over a link of the
// caller's ignores them.

// WithCredit sets the receiver's link credit: how many deliveries the
// broker may push ahead of the handlers. A credit below the concurrency
// leaves workers idle. The window refills as deliveries are settled
// (go-amqp grants the settled ones again), so it bounds what the process
// holds: at most n messages (memory: n times the largest message; lower it
// for messages of hundreds of KB). Deliveries held on credit when ctx ends
// go back to the queue with the link, not counted as a delivery attempt
// (Artemis, on a clean detach); after a crash Artemis may count every
// delivery the process held as an attempt. A negative n is refused by
// NewConsumer (ErrInvalidConfig). Only Client.Consume and Subscribe use it.
// Default: max(2*concurrency, MinCredit), 100 up to 50 workers: the window
// at which eight workers get raw go-amqp's throughput, while two instances
// sharing a backlog still take even shares.
func WithCredit(n int) ConsumerOption {
	return consumerOption(func(c *Consumer) { c.run.credit = n })
}

// WithoutDeadLetter has Client.Consume attach no dead-letter sender:
// messages that would be dead-lettered are dropped and reported, as the
// Consumer does without one. Ignored when the Consumer has its own
// (WithDeadLetterSender). Only Client.Consume and Subscribe use it.
// Default: a dead-letter sender to <queue>.dlq.
func WithoutDeadLetter() ConsumerOption {
	return consumerOption(func(c *Consumer) { c.run.noDeadLetter = true })
}

// WithMaxMessages makes Client.Consume return, nil, once it has taken n
// deliveries and they were handled and settled, for a job that works a
// batch and exits. No delivery beyond them reaches a handler: those the
// broker pushed ahead on credit go back to the queue with the link,
// uncounted (the credit is at most n). A negative n is refused by
// NewConsumer (ErrInvalidConfig). Only Client.Consume and Subscribe use it.
// Default: 0, no limit.
func WithMaxMessages(n int) ConsumerOption {
	return consumerOption(func(c *Consumer) { c.run.maxMessages = n })
}

// WithStopWhenIdle makes Client.Consume return, nil, once no delivery has
// come for d (the queue is empty, as far as a receiver can tell: AMQP has
// no end-of-queue mark), after the handlers in flight settled. A delivery
// a handler failed and the broker sends again after that stays on the
// queue for the next run. On a cluster Client it returns once every
// member's receiver was idle. With WithMaxMessages, whichever comes first.
// A negative d is refused by NewConsumer (ErrInvalidConfig). Only
// Client.Consume and Subscribe use it. Default: 0, never.
func WithStopWhenIdle(d time.Duration) ConsumerOption {
	return consumerOption(func(c *Consumer) { c.run.stopWhenIdle = d })
}

// WithSelector sets a JMS message selector the broker applies before it
// delivers: a message it excludes is never sent to this consumer, so it is
// neither decoded, handled nor dead-lettered here (see docs/pubsub.md). It
// reads the message's properties: JMSType (the URN), the bq_ properties and
// the application headers, for example "bq_source_lang = 'java'" or
// "region IN ('eu','uk')". On a queue it filters this consumer only: the
// messages it excludes stay on the queue for other consumers. On a
// subscription (Client.Subscribe) it is the subscription queue's filter,
// set when the broker creates the queue: the messages it excludes never
// enter it. It is checked when Consume or Subscribe starts
// (ErrInvalidConfig), and a selector the broker refuses ends them at the
// attach with an error matching ErrInvalidConfig that quotes it. Only
// Client.Consume and Subscribe use it. Default: none.
func WithSelector(s string) ConsumerOption {
	return consumerOption(func(c *Consumer) { c.run.selector = s })
}

// WithOnlyHandledURNs has the broker deliver only the URNs the Consumer has
// handlers for (JMSType IN (...), AND-ed with WithSelector's): an event of
// another URN is never delivered, so the unknown-URN strategy never sees
// it. Only Client.Consume and Subscribe use it. Default: off, every
// message is delivered.
func WithOnlyHandledURNs() ConsumerOption {
	return consumerOption(func(c *Consumer) { c.run.onlyHandled = true })
}

// source is what a consume loop's receiver asks of the broker besides the
// queue: the "topic" capability of a subscription (Subscribe) and the
// selector (WithSelector and WithOnlyHandledURNs, composed and
// checked; "" for none).
type source struct {
	topic    bool
	selector string
}

// consume is Consume on one broker, cons and o validated and credit
// settled.
func (c *Client) consume(ctx context.Context, queue string, src source, cons *Consumer, o consumeOptions, credit int32) error {
	// The Consumer is immutable; give this loop its own copy wired to the
	// Client's dead-letter sender. (Consumer holds no locks, so a copy is a
	// faithful one.)
	run := *cons
	if run.queue == "" || src.topic {
		// A subscription's name is always its address::queue: that is
		// where a dead letter's redrive must go.
		run.queue = queue
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

	l := &consumeLoop{c: c, queue: queue, cons: &run, dlq: dlq, retry: retry, credit: credit, src: src}
	err := l.run(ctx)
	l.detach(ctx)
	return err
}

type consumeLoop struct {
	c      *Client
	queue  string
	cons   *Consumer
	dlq    *clientSender
	retry  *clientSender
	credit int32

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
	lr, err := cn.sess.NewReceiver(actx, l.queue, receiverOptions(l.credit, l.src))
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
	if l.dlq != nil {
		// Attached now, not on the first dead-letter write, so a refused
		// dead-letter address is seen at once (and Artemis creates it).
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

// countingReceiver notes that a delivery was settled on its link.
type countingReceiver struct {
	linkReceiver
	settled atomic.Bool
}

func (r *countingReceiver) note(err error) error {
	if err == nil && !r.settled.Load() {
		// Written once: a store on every settlement would take the cache
		// line from the other workers each time.
		r.settled.Store(true)
	}
	return err
}

func (r *countingReceiver) AcceptMessage(ctx context.Context, msg *amqp.Message) error {
	return r.note(r.linkReceiver.AcceptMessage(ctx, msg))
}

func (r *countingReceiver) ReleaseMessage(ctx context.Context, msg *amqp.Message) error {
	return r.note(r.linkReceiver.ReleaseMessage(ctx, msg))
}

func (r *countingReceiver) ModifyMessage(ctx context.Context, msg *amqp.Message, opts *amqp.ModifyMessageOptions) error {
	return r.note(r.linkReceiver.ModifyMessage(ctx, msg, opts))
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
	return o
}
