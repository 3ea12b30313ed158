package artemis

import "time"

// The options below are a Consumer's (ConsumerOptions) that only
// Client.Consume and Client.Subscribe read: Listen over a link of the
// caller's ignores them.

// WithCredit sets the receiver's link credit: how many deliveries the
// broker may push ahead of the handlers. A credit below the concurrency
// leaves workers idle. The window refills as deliveries are settled (the
// Client grants the settled ones again), so it bounds what the process
// holds: at most n messages, and no more bytes of them than
// WithCreditBytes allows (a larger message still comes, one at a time).
// Deliveries held on credit when ctx ends go back to the queue with the
// link, not counted as a delivery attempt (Artemis, on a clean detach);
// after a crash Artemis may count every delivery the process held as an
// attempt. A negative n is refused by
// NewConsumer (ErrInvalidConfig). Only Client.Consume and Subscribe use it.
// Default: max(2*concurrency, MinCredit), 100 up to 50 workers: the window
// at which eight workers get raw go-amqp's throughput, while two instances
// sharing a backlog still take even shares.
func WithCredit(n int) ConsumerOption {
	return consumerOption(func(c *Consumer) { c.run.credit = n })
}

// WithCreditBytes sets the byte budget of the receiver's link: the credit
// is granted so that the deliveries the process holds (in handlers and
// pushed ahead) come to at most n bytes, each one still to come counted
// at the largest size seen (docs/consuming.md, "Credit"). A message
// larger than n still comes, one at a time. A cluster Client's budget is
// per member's link. n < 1 is refused by NewConsumer (ErrInvalidConfig).
// Only Client.Consume and Subscribe use it.
// Default: DefaultCreditBytes (32 MiB).
func WithCreditBytes(n int64) ConsumerOption {
	return consumerOption(func(c *Consumer) { c.run.creditBytes = n; c.run.creditBytesSet = true })
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

// WithNonDurable makes Client.Subscribe's subscription live only while a
// consumer is attached to it: a non-durable queue that Artemis creates at
// the first attach, shares between every consumer that subscribes with the
// same topic and subscription name (in any process), and deletes when the
// last one detaches, with what it still holds. Nothing published while no
// consumer runs is kept for it. Its queue is
// <subscription>:shared-volatile:global (what a JMS shared non-durable
// subscription over AMQP uses), its dead letters go to that name's .dlq,
// which is kept, and its retries are immediate redeliveries: a scheduled
// copy could outlive the queue, so a Consumer with WithRetrySchedule,
// WithRetryBackoff or WithRetrySender is refused (docs/pubsub.md). Subscribe only: Consume
// refuses it. Default: off, the subscription is a durable queue.
func WithNonDurable() ConsumerOption {
	return consumerOption(func(c *Consumer) { c.run.nonDurable = true })
}

// creditBudget is the link's byte budget: WithCreditBytes's, else
// DefaultCreditBytes.
func (o consumeOptions) creditBudget() int64 {
	if o.creditBytesSet {
		return o.creditBytes
	}
	return DefaultCreditBytes
}
