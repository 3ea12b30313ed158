package artemis_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/Azure/go-amqp"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// counters is an Observer that counts: atomic, so it is safe for the
// consumer's workers, and it never blocks.
type counters struct {
	accepted, failed, published atomic.Int64
}

func (c *counters) Settled(ev artemis.SettleEvent) {
	if ev.Kind == nil {
		c.accepted.Add(1)
		return
	}
	c.failed.Add(1)
}

func (c *counters) Published(artemis.PublishEvent) { c.published.Add(1) }

// One Observer on a publisher and a consumer counts what they did, with
// no handler wrapped.
func ExampleWithObserver() {
	ctx := context.Background()
	m := &counters{}
	sender := &fakelink.Sender{} // a go-amqp *amqp.Sender in a real program
	pub := artemis.NewPublisher(sender, "orders", artemis.WithPublishObserver(m))
	for id := range 3 {
		if _, err := pub.Publish(ctx, "urn:babel:orders:created", map[string]int{"order_id": id}); err != nil {
			fmt.Println(err)
		}
	}

	consumer, err := artemis.NewConsumer(artemis.Handlers{
		"urn:babel:orders:created": func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
			var order struct {
				OrderID int `json:"order_id"`
			}
			if err := env.Bind(&order); err != nil || order.OrderID == 1 {
				return fmt.Errorf("order %d failed", order.OrderID)
			}
			return nil
		},
	}, artemis.WithObserver(m), artemis.WithOnError(func(context.Context, error, *artemis.Envelope, *amqp.Message) {}))
	if err != nil {
		fmt.Println(err)
		return
	}
	receiver := fakelink.NewCountingReceiver() // a go-amqp *amqp.Receiver in a real program
	for _, msg := range sender.Sent() {
		_ = consumer.Handle(ctx, receiver, msg)
	}
	fmt.Printf("published %d, accepted %d, failed %d\n", m.published.Load(), m.accepted.Load(), m.failed.Load())
	// Output: published 3, accepted 2, failed 1
}

// A readiness probe that answers 503 while the Client has no connection.
func ExampleClient_Status() {
	var client *artemis.Client // from artemis.Dial
	http.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		s := client.Status()
		if !s.Connected {
			http.Error(w, fmt.Sprintf("not connected since %v: %v", s.Since, s.LastError), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "connected to %s since %v\n", s.URL, s.Since)
	})
}
