package artemis_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// queueCapability makes Artemis create an anycast queue for the address, so
// messages sent before a receiver attaches are kept.
var queueCapability = []string{"queue"}

type OrderCreated struct {
	OrderID  int64   `json:"order_id"`
	Amount   float64 `json:"amount"`
	Currency string  `json:"currency"`
}

// Publish an order over a go-amqp sender attached with the queue capability.
func ExamplePublisher_Publish() {
	ctx := context.Background()
	conn, err := amqp.Dial(ctx, os.Getenv("ARTEMIS_URL"), nil) // amqp://user:pass@127.0.0.1:5672
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	session, err := conn.NewSession(ctx, nil)
	if err != nil {
		log.Print(err)
		return
	}
	sender, err := session.NewSender(ctx, "orders", &amqp.SenderOptions{TargetCapabilities: queueCapability})
	if err != nil {
		log.Print(err)
		return
	}

	pub := artemis.NewPublisher(sender, "orders")
	id, err := pub.Publish(ctx, artemis.Job("urn:babel:orders:created", OrderCreated{OrderID: 1042, Amount: 99.9, Currency: "USD"}), artemis.WithDelay(5*time.Second))
	if err != nil {
		log.Print(err) // the broker did not accept it: nothing was stored
		return
	}
	fmt.Println("published", id)
}

// Consume with a dead-letter queue: failures are retried through Artemis's
// delivery count, then written to orders.dlq.
func ExampleConsumer_Listen() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	conn, err := amqp.Dial(ctx, os.Getenv("ARTEMIS_URL"), nil)
	if err != nil {
		log.Print(err)
		return
	}
	defer conn.Close()
	session, err := conn.NewSession(ctx, nil)
	if err != nil {
		log.Print(err)
		return
	}
	receiver, err := session.NewReceiver(ctx, "orders", &amqp.ReceiverOptions{
		SourceCapabilities: queueCapability,
		Credit:             10,
	})
	if err != nil {
		log.Print(err)
		return
	}
	dlq, err := session.NewSender(ctx, "orders.dlq", &amqp.SenderOptions{TargetCapabilities: queueCapability})
	if err != nil {
		log.Print(err)
		return
	}

	consumer, err := artemis.NewConsumer(artemis.Handlers{
		"urn:babel:orders:created": func(ctx context.Context, env *artemis.Envelope, _ *amqp.Message) error {
			var order OrderCreated
			if err := env.Bind(&order); err != nil {
				return err
			}
			fmt.Println("order", order.OrderID, "attempt", env.Attempts, "trace", env.TraceID)
			return nil
		},
	},
		artemis.WithDeadLetterSender(dlq),
		artemis.WithMaxTries(3),
		artemis.WithOnError(func(_ context.Context, err error, _ *artemis.Envelope, _ *amqp.Message) {
			log.Println(err)
		}),
	)
	if err != nil {
		log.Print(err) // an invalid configuration, matching ErrInvalidConfig
		return
	}
	if err := consumer.Listen(ctx, receiver); err != nil {
		log.Print(err) // the link failed; reconnect (see Client.Consume) or exit
	}
}

// Handle one delivery from a receive loop you own.
func ExampleConsumer_Handle() {
	ctx := context.Background()
	var receiver *amqp.Receiver // attached with the queue capability
	consumer, err := artemis.NewConsumer(artemis.Handlers{
		"urn:babel:orders:created": func(context.Context, *artemis.Envelope, *amqp.Message) error { return nil },
	})
	if err != nil {
		return // an invalid configuration: ErrInvalidConfig says what
	}
	for {
		msg, err := receiver.Receive(ctx, nil)
		if err != nil {
			return
		}
		if err := consumer.Handle(ctx, receiver, msg); errors.Is(err, artemis.ErrSettlement) {
			return // the link is gone; the broker redelivers what was not settled
		}
	}
}

// HeaderCarrier satisfies OpenTelemetry's propagation.TextMapCarrier: inject
// into it before publishing, extract from HeadersFromContext in a handler.
func ExampleHeaderCarrier() {
	h := artemis.HeaderCarrier{}
	h.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	h.Set("tracestate", "vendor=1")
	fmt.Println(h.Keys())

	env, _ := artemis.NewEnvelope("urn:babel:orders:created", nil)
	msg, _ := artemis.NewMessage(env, artemis.WithHeaders(h))
	fmt.Println(artemis.Headers(msg).Get("traceparent"))
	// Output:
	// [traceparent tracestate]
	// 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
}

// Decode keeps the data object raw, so integers above 2^53 survive.
func ExampleDecode() {
	body := []byte(`{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":9007199254740993},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"php","schema_version":1,"created_at":1749132727000},"attempts":0}`)
	env, err := artemis.Decode(body)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(env.URN, env.Validate(), string(env.Data))
	out, _ := env.Encode()
	fmt.Println(string(out) == string(body))
	// Output:
	// urn:babel:orders:created <nil> {"order_id":9007199254740993}
	// true
}

// NewMessage shows the AMQP projection a JMS peer reads.
func ExampleNewMessage() {
	env, _ := artemis.NewEnvelope("urn:babel:orders:created", map[string]int{"order_id": 1042},
		artemis.EnvelopeTraceID("7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b"))
	msg, _ := artemis.NewMessage(env)
	fmt.Println(msg.Annotations["x-opt-jms-type"])
	fmt.Println(msg.Properties.CorrelationID)
	fmt.Println(msg.ApplicationProperties["bq_schema_version"], msg.ApplicationProperties["bq_source_lang"],
		msg.ApplicationProperties["bq_attempts"], msg.ApplicationProperties["bq_app_id"])
	// Output:
	// urn:babel:orders:created
	// 7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b
	// 1 go 0 babelqueue
}

// counters is an Observer that counts: atomic, so it is safe for the
// consumer's workers, and it never blocks.
type counters struct {
	accepted, failed, published atomic.Int64
}

func (c *counters) Settled(ev artemis.SettleEvent) {
	if ev.Kind == artemis.KindNone {
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
	pub := artemis.NewPublisher(sender, "orders", artemis.WithObserver(m))
	for id := range 3 {
		if _, err := pub.Publish(ctx, artemis.Job("urn:babel:orders:created", map[string]int{"order_id": id})); err != nil {
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
