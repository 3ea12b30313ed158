// Publish-subscribe on Artemis multicast addresses: a publisher to a topic
// and a consumer of one subscription queue on it (docs/pubsub.md).

package artemis

import (
	"context"
	"fmt"
	"strings"
)

// TopicPublisher is Publisher for a topic: it attaches a sender to the
// multicast address topic with the "topic" capability (Artemis creates the
// address as multicast when it is missing), and every publish is delivered
// to each subscription queue on the address, as a JMS topic does. It has
// everything Publisher has: the same ClientPublisher, options, receipts,
// duplicate detection and reconnects. meta.queue is topic.
//
// A publish to an address with no subscription queue is accepted by the
// broker and dropped: nobody was subscribed, so nobody misses it. A
// subscriber that must not miss events subscribes (Subscribe) before they
// are published; its durable subscription queue keeps them from then on,
// consumers running or not.
func (c *Client) TopicPublisher(ctx context.Context, topic string, opts ...PublishOption) (*ClientPublisher, error) {
	if err := checkAddressPart("topic", topic); err != nil {
		return nil, err
	}
	return c.publisher(ctx, topic, true, opts)
}

// Subscribe is Consume for a subscription: cons consumes the subscription
// queue named subscription on the multicast address topic, through its
// fully qualified name topic::subscription, attached with the "topic"
// capability. Artemis creates the queue when it is missing (with
// auto-create-queues, its default): a durable multicast queue on topic,
// with the Consumer's WithSelector as its filter, which from then on receives
// a copy of every message published to topic, whether or not a consumer
// runs. Every consumer that subscribes with the same topic and subscription,
// in this process or another, shares that queue: each message is handled
// by one of them. So a service gives all its instances one subscription
// name (usually the service's name), and two services give two names: each
// service gets every event once.
//
// Everything else is Consume's: workers, groups, the version gate, poison,
// retries, the Observer, the reconnects, the cluster. The dead-letter
// queue is the subscription's own, <subscription>.dlq (an anycast queue,
// never on topic's address), and a dead letter's original_queue is
// topic::subscription, so a redrive (bqartemis redrive) goes back to this
// subscription only.
//
// The queue outlives its consumers until it is deleted (bqartemis or the
// broker's console), unless the broker's address settings auto-delete
// queues (docs/pubsub.md). Its filter is fixed when it is created: to
// change a subscription's selector (or WithOnlyHandledURNs's URN list), delete
// the queue or use a new name. Artemis refuses an attach with another
// selector than the existing queue's filter, and Subscribe then returns at
// once with an error matching ErrInvalidConfig.
//
// With WithNonDurable the subscription lives only while a consumer is
// attached: a shared non-durable queue
// <subscription>:shared-volatile:global, deleted with its last consumer,
// which retries at once (docs/pubsub.md, "Durable or non-durable").
func (c *Client) Subscribe(ctx context.Context, topic, subscription string, cons *Consumer) error {
	if c.be == nil {
		return errNotBuilt
	}
	if err := checkAddressPart("topic", topic); err != nil {
		return err
	}
	if err := checkAddressPart("subscription", subscription); err != nil {
		return err
	}
	src := source{topic: true}
	if cons != nil && cons.run.nonDurable {
		if strings.Contains(subscription, "|") {
			return fmt.Errorf("%w: the non-durable subscription name %q holds \"|\" (Artemis cuts a shared subscription's name there)", ErrInvalidConfig, subscription)
		}
		src.volatile = &volatileSub{topic: topic, name: subscription}
		return c.consumeOn(ctx, topic+"::"+src.volatile.queue(), src, cons)
	}
	return c.consumeOn(ctx, topic+"::"+subscription, src, cons)
}

// checkAddressPart refuses a blank name, one holding "::", which Artemis
// would read as address::queue, and one starting or ending with ":",
// which would make one with the "::" Subscribe adds.
func checkAddressPart(what, name string) error {
	switch {
	case strings.TrimSpace(name) == "":
		return fmt.Errorf("%w: the %s name is blank", ErrInvalidConfig, what)
	case strings.Contains(name, "::"):
		return fmt.Errorf("%w: the %s name %q holds \"::\" (Subscribe builds topic::subscription itself)", ErrInvalidConfig, what, name)
	case strings.HasPrefix(name, ":") || strings.HasSuffix(name, ":"):
		return fmt.Errorf("%w: the %s name %q starts or ends with \":\" (topic::subscription would hold \":::\", read as another address::queue)", ErrInvalidConfig, what, name)
	}
	return nil
}
