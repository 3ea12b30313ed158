package broker

import (
	"context"
	"fmt"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// Connect dials the library's Client to url and opens a publisher on queue:
// the start-up of every example that works through the Client.
func Connect(ctx context.Context, url, queue string, opts ...artemis.PublishOption) (*artemis.Client, *artemis.ClientPublisher, error) {
	client, err := artemis.Dial(ctx, []string{url}, nil)
	if err != nil {
		return nil, nil, err
	}
	pub, err := client.Publisher(ctx, queue, opts...)
	if err != nil {
		client.Close(context.Background())
		return nil, nil, err
	}
	return client, pub, nil
}

// Consumer is client.Consume running in the background, so an example can
// publish while it listens and wait for what its handlers saw.
type Consumer struct {
	stop context.CancelFunc
	done chan error
}

// Consume builds a Consumer of h and opts and starts client.Consume(ctx,
// queue, it, nil) in a goroutine. It runs until Stop, or until ctx ends.
func Consume(ctx context.Context, client *artemis.Client, queue string, h artemis.Handlers, opts ...artemis.ConsumerOption) (*Consumer, error) {
	cons, err := artemis.NewConsumer(h, opts...)
	if err != nil {
		return nil, err
	}
	cctx, stop := context.WithCancel(ctx)
	c := &Consumer{stop: stop, done: make(chan error, 1)}
	go func() { c.done <- client.Consume(cctx, queue, cons) }()
	return c, nil
}

// Done yields Consume's error when Consume returns before Stop is called
// (the consumer stopped early). After a receive from Done, do not call Stop.
func (c *Consumer) Done() <-chan error { return c.done }

// Stop ends the consumer and returns Consume's error: nil after a clean
// stop, once the handlers in flight have settled.
func (c *Consumer) Stop() error {
	c.stop()
	return <-c.done
}

// Early turns an error received from Done into the error an example
// returns: the consumer stopped before the example was finished with it.
func Early(err error) error { return fmt.Errorf("the consumer stopped early: %v", err) }
