// Package workload is the run the metrics examples (otelmetrics,
// prometheus) measure: Orders orders published and consumed through the
// example's Observer, order FailingOrder failing every try until it is
// dead-lettered.
package workload

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/broker"
)

// URNCreated is the URN of the orders.
const URNCreated = "urn:babel:orders:created"

// FailingOrder is the order whose handler fails every time.
const FailingOrder = 1003

// Orders is how many orders are published (1001 ...).
const Orders = 5

// MaxTries is how many deliveries a failing order gets.
const MaxTries = 3

// Settlements is how many settlements the run makes: every order but one
// accepted, the failing one scheduled for a retry MaxTries-1 times, then
// dead-lettered.
const Settlements = Orders - 1 + MaxTries

// counter passes every event on to an Observer and counts the
// settlements: how Run knows the queue is through.
type counter struct {
	artemis.Observer
	n    atomic.Int64
	done chan struct{}
}

func newCounter(o artemis.Observer) *counter {
	return &counter{Observer: o, done: make(chan struct{})}
}

// Settled passes ev on and closes done at the run's last settlement.
func (c *counter) Settled(ev artemis.SettleEvent) {
	c.Observer.Settled(ev)
	if c.n.Add(1) == Settlements {
		close(c.done)
	}
}

// Run dials the Client to url, publishes the orders to queue and consumes
// them until every delivery is settled for good, telling out what it did.
// The example's Observer o is the hook on both sides: the publisher's
// (artemis.WithObserver) and the consumer's (artemis.WithObserver,
// next to WithMaxTries(MaxTries)).
func Run(ctx context.Context, url, queue string, o artemis.Observer, out io.Writer) error {
	obs := newCounter(o)
	client, pub, err := broker.Connect(ctx, url, queue, artemis.WithObserver(obs))
	if err != nil {
		return err
	}
	defer client.Close(context.Background())
	return consume(ctx, client, pub, queue, obs, out)
}

// consume publishes the orders with pub and consumes them from queue on
// client until obs heard every settlement.
func consume(ctx context.Context, client *artemis.Client, pub *artemis.ClientPublisher, queue string, obs *counter, out io.Writer) error {
	handle := func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		var order struct {
			ID int `json:"order_id"`
		}
		if err := env.Bind(&order); err != nil {
			return err
		}
		if order.ID == FailingOrder {
			return fmt.Errorf("order %d: payment gateway timeout", order.ID)
		}
		return nil
	}
	// No WithOnError and no WithLogger: the failures are also logged, at
	// warn, to slog.Default() (standard error).
	cons, err := broker.Consume(ctx, client, queue, artemis.Handlers{URNCreated: handle},
		artemis.WithMaxTries(MaxTries), artemis.WithObserver(obs),
		// Short waits, so the run stays short; a retry is the "scheduled"
		// disposition, its wait in SettleEvent.RetryDelay.
		artemis.WithRetryBackoff(artemis.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}))
	if err != nil {
		return err
	}
	for i := range Orders {
		if _, err := pub.Publish(ctx, artemis.Job(URNCreated, map[string]int{"order_id": 1001 + i})); err != nil {
			_ = cons.Stop()
			return err
		}
	}
	fmt.Fprintf(out, "published %d orders; order %d fails every time\n", Orders, FailingOrder)
	select {
	case <-obs.done:
	case err := <-cons.Done():
		return broker.Early(err)
	case <-ctx.Done():
		_ = cons.Stop()
		return fmt.Errorf("gave up after %d of %d settlements: %w", obs.n.Load(), Settlements, ctx.Err())
	}
	if err := cons.Stop(); err != nil {
		return err
	}
	fmt.Fprintf(out, "%d settlements observed\n", obs.n.Load())
	return nil
}
