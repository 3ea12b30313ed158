package artemis_test

// A tour of the Client path, the one to take in a service: Dial, a
// publisher, receipts, Consume, and reading a dead-letter queue.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/Azure/go-amqp"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// Dial a live broker and its backup: the Client tries them in order, keeps
// a connection open, and re-dials after a loss while publishers and
// consumers wait within their own contexts.
func ExampleDial() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := artemis.Dial(ctx, []string{
		os.Getenv("ARTEMIS_URL"),                   // amqp://user:pass@live:5672 (percent-encode @ / ? # % in the password)
		"amqp://user:pass@backup.example.com:5672", // tried when the live broker does not answer
	}, &artemis.ClientOptions{
		OnEvent: func(ev artemis.ConnectionEvent) { log.Println(ev) }, // losses and recoveries, password masked
	})
	if err != nil {
		log.Print(err) // errors.Is(err, artemis.ErrConnect): no URL answered; nothing to close
		return
	}
	defer client.Close(context.Background())
	fmt.Println(client.Status().Connected)
}

// A ClientPublisher keeps its link attached across connection losses.
// With WithDuplicateDetection a publish whose outcome was lost with the
// connection is sent once more, and Artemis stores it once.
func ExampleClient_Publisher() {
	ctx := context.Background()
	client, err := artemis.Dial(ctx, []string{os.Getenv("ARTEMIS_URL")}, nil)
	if err != nil {
		log.Print(err)
		return
	}
	defer client.Close(context.Background())

	pub, err := client.Publisher(ctx, "orders", artemis.WithDuplicateDetection())
	if err != nil {
		log.Print(err)
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second) // this caller's deadline, and no one else's
	defer cancel()
	id, err := pub.Publish(pctx, artemis.Job("urn:babel:orders:created", OrderCreated{OrderID: 1042, Amount: 99.9, Currency: "USD"}))
	switch {
	case errors.Is(err, artemis.ErrOutcomeUnknown):
		log.Print("the broker may have stored it: ", err) // resend the same envelope to be sure
	case err != nil:
		log.Print(err) // refused, or never sent
	default:
		fmt.Println("stored", id)
	}
}

// PublishWithReceipt returns once the transfer is written, so one
// goroutine keeps many in flight; each Receipt resolves to the broker's
// outcome.
func ExampleClientPublisher_PublishWithReceipt() {
	ctx := context.Background()
	client, err := artemis.Dial(ctx, []string{os.Getenv("ARTEMIS_URL")}, nil)
	if err != nil {
		log.Print(err)
		return
	}
	defer client.Close(context.Background())
	pub, err := client.Publisher(ctx, "orders")
	if err != nil {
		log.Print(err)
		return
	}

	receipts := make([]*artemis.Receipt, 0, 100)
	for i := range 100 {
		r, err := pub.PublishWithReceipt(ctx, artemis.Job("urn:babel:orders:created", OrderCreated{OrderID: int64(i)}))
		if err != nil {
			log.Print(err) // not written: nothing to wait for
			break
		}
		receipts = append(receipts, r)
	}
	stored := 0
	for _, r := range receipts {
		if err := r.Wait(ctx); err != nil {
			log.Printf("%s: %v", r.ID(), err)
			continue
		}
		stored++
	}
	fmt.Println(stored, "stored")
}

// Consume runs a Consumer on a queue until its context ends, re-attaching
// after a loss. Failed attempts are redelivered through Artemis's delivery
// count, then dead-lettered to orders.dlq through the Client's own sender.
func ExampleClient_Consume() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	client, err := artemis.Dial(ctx, []string{os.Getenv("ARTEMIS_URL")}, nil)
	if err != nil {
		log.Print(err)
		return
	}
	defer client.Close(context.Background())

	cons, err := artemis.NewConsumer(artemis.Handlers{
		"urn:babel:orders:created": func(ctx context.Context, env *artemis.Envelope, _ *amqp.Message) error {
			var order OrderCreated
			if err := env.Bind(&order); err != nil {
				return err // a failed attempt: retried, then dead-lettered
			}
			log.Printf("order %d, attempt %d, trace %s", order.OrderID, env.Attempts, env.TraceID)
			return nil // accepted
		},
	}, artemis.WithConcurrency(8), artemis.WithMaxTries(3))
	if err != nil {
		log.Print(err)
		return
	}
	// Returns nil once ctx ends and the handlers in flight have settled.
	if err := client.Consume(ctx, "orders", cons); err != nil {
		log.Print(err)
	}
}

// A topic: TopicPublisher publishes each event once to the multicast
// address orders.events; every subscription on it gets a copy.
func ExampleClient_TopicPublisher() {
	ctx := context.Background()
	client, err := artemis.Dial(ctx, []string{os.Getenv("ARTEMIS_URL")}, nil)
	if err != nil {
		log.Print(err)
		return
	}
	defer client.Close(context.Background())
	pub, err := client.TopicPublisher(ctx, "orders.events")
	if err != nil {
		log.Print(err)
		return
	}
	// Accepted, and dropped by the broker, when nobody is subscribed.
	if _, err := pub.Publish(ctx, artemis.Job("urn:babel:orders:created", OrderCreated{OrderID: 42})); err != nil {
		log.Print(err)
	}
}

// A subscription: every instance of the billing service subscribes under
// the same name, so they share the durable queue orders.events::billing
// and billing handles each event once. The broker delivers only the URNs
// billing handles; its dead letters go to billing.dlq.
func ExampleClient_Subscribe() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	client, err := artemis.Dial(ctx, []string{os.Getenv("ARTEMIS_URL")}, nil)
	if err != nil {
		log.Print(err)
		return
	}
	defer client.Close(context.Background())
	cons, err := artemis.NewConsumer(artemis.Handlers{
		"urn:babel:orders:created": func(ctx context.Context, env *artemis.Envelope, _ *amqp.Message) error {
			var order OrderCreated
			if err := env.Bind(&order); err != nil {
				return err
			}
			log.Printf("charge order %d", order.OrderID)
			return nil
		},
	}, artemis.WithConcurrency(8), artemis.WithOnlyHandledURNs())
	if err != nil {
		log.Print(err)
		return
	}
	err = client.Subscribe(ctx, "orders.events", "billing", cons)
	if err != nil {
		log.Print(err)
	}
}

// A DLQ reader: the records on orders.dlq are envelopes with a dead_letter
// block; a handler for their URN sees why each one failed (to look without
// taking them off the queue, use bqartemis inspect, which browses). A
// poison record (a body that was never an envelope) is not one either: it
// moves on to orders.dlq.dlq, reported, never dropped.
func ExampleDeadLetter() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := artemis.Dial(ctx, []string{os.Getenv("ARTEMIS_URL")}, nil)
	if err != nil {
		log.Print(err)
		return
	}
	defer client.Close(context.Background())

	cons, err := artemis.NewConsumer(artemis.Handlers{
		"urn:babel:orders:created": func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
			if dl := env.DeadLetter; dl != nil {
				log.Printf("%s failed %d times on %s: reason %s, error %v", env.Meta.ID, dl.Attempts+1, dl.OriginalQueue, dl.Reason, deref(dl.Error))
			}
			return nil
		},
	}, artemis.WithOnError(func(_ context.Context, err error, _ *artemis.Envelope, _ *amqp.Message) {
		log.Print(err) // a poison record, moved on
	}))
	if err != nil {
		log.Print(err)
		return
	}
	_ = client.Consume(ctx, "orders.dlq", cons)
}

func deref(s *string) string {
	if s == nil {
		return "<none>"
	}
	return *s
}
