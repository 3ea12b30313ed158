// Command pubsub is an event bus on an Artemis topic: one publish, every
// service gets it. An order service publishes order events to a multicast
// address; billing (two instances) and shipping (one) each consume it
// through a durable subscription of their own.
//
//   - Each service handles each event once: billing's two instances share
//     the billing subscription queue, so an event goes to one of them.
//
//   - Shipping subscribes with WithOnlyHandledURNs: the broker delivers it the
//     order-created events only; the cancellations never reach it.
//
//   - Billing fails one order every time: it is dead-lettered to billing's
//     own DLQ, <topic>.billing.dlq, whose record names the subscription
//     (<topic>::<topic>.billing) as its original queue, so a redrive goes
//     back to billing alone. Shipping packed that order all the same.
//
//     cd examples && go run ./pubsub [-queue shop.orders] [-timeout 60s]
//
// -queue names the topic. The broker is ARTEMIS_URL (default
// amqp://babel:babel@127.0.0.1:5672). The subscription queues stay on the
// broker (they keep collecting events: delete them when done), and so
// does the dead-letter record, for bqartemis inspect <topic>.billing.dlq
// and bqartemis redrive <topic>.billing.dlq.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/broker"
	"github.com/babelqueue/babelqueue-go-artemis/internal/queuelink"
)

// The events on the bus.
const (
	URNCreated   = "urn:babel:orders:created"
	URNCancelled = "urn:babel:orders:cancelled"
)

// FailingOrder is the order billing cannot charge.
const FailingOrder = 1003

func main() {
	var cfg broker.Config
	broker.Main("pubsub", &cfg, broker.Flags{QueueHelp: "the topic (default: a fresh pubsub-<random> one)", Timeout: time.Minute},
		func(ctx context.Context, out io.Writer) error { return run(ctx, cfg, out) })
}

// Order is the events' data.
type Order struct {
	OrderID int `json:"order_id"`
}

// event is what one handler call did, for the report.
type event struct {
	service, instance, urn, outcome string
	order                           int
}

func run(ctx context.Context, cfg broker.Config, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	topic := cfg.Queue
	billing, shipping := topic+".billing", topic+".shipping"
	fmt.Fprintf(out, "pubsub example: topic %s, subscriptions %s and %s, broker %s\n", topic, billing, shipping, broker.Redact(cfg.URL))

	events := make(chan event, 64)
	handler := func(service, instance, verb string) artemis.HandlerFunc {
		return func(ctx context.Context, env *artemis.Envelope, _ *amqp.Message) error {
			var o Order
			if err := env.Bind(&o); err != nil {
				return err
			}
			ev := event{service: service, instance: instance, urn: env.URN, order: o.OrderID, outcome: verb}
			var err error
			if service == "billing" && o.OrderID == FailingOrder {
				err = fmt.Errorf("card declined (order %d)", o.OrderID)
				ev.outcome = "failed: " + err.Error() + " -> dead-lettered to " + billing + ".dlq"
			}
			select {
			case events <- ev:
			case <-ctx.Done():
			}
			return err
		}
	}

	// Three instances, each on a Client of its own as in three processes:
	// billing-1 and billing-2 share the billing subscription.
	var wg sync.WaitGroup
	sctx, stop := context.WithCancel(ctx)
	defer func() { stop(); wg.Wait() }()
	errs := make(chan error, 3)
	attached := make(chan struct{}, 3)
	for _, in := range []struct {
		service, instance string
		h                 artemis.Handlers
		opts              []artemis.ConsumerOption
	}{
		{"billing", "billing-1", artemis.Handlers{URNCreated: handler("billing", "billing-1", "charged"), URNCancelled: handler("billing", "billing-1", "refunded")}, nil},
		{"billing", "billing-2", artemis.Handlers{URNCreated: handler("billing", "billing-2", "charged"), URNCancelled: handler("billing", "billing-2", "refunded")}, nil},
		{"shipping", "shipping-1", artemis.Handlers{URNCreated: handler("shipping", "shipping-1", "packed")}, []artemis.ConsumerOption{artemis.WithOnlyHandledURNs()}},
	} {
		client, err := artemis.Dial(ctx, []string{cfg.URL}, &artemis.ClientOptions{OnEvent: func(ev artemis.ConnectionEvent) {
			if ev.Kind == artemis.EventConsumerAttached {
				attached <- struct{}{}
			}
		}})
		if err != nil {
			return err
		}
		defer client.Close(context.Background())
		cons, err := artemis.NewConsumer(in.h, append(in.opts, artemis.WithMaxTries(1),
			artemis.WithOnError(func(context.Context, error, *artemis.Envelope, *amqp.Message) {}))...)
		if err != nil {
			return err
		}
		wg.Go(func() {
			if err := client.Subscribe(sctx, topic, topic+"."+in.service, cons); err != nil {
				errs <- fmt.Errorf("%s: %w", in.instance, err)
			}
		})
	}
	// Subscribe before publishing: a topic keeps an event only for the
	// subscriptions that exist when it is published.
	for range 3 {
		select {
		case <-attached:
		case err := <-errs:
			return err
		case <-ctx.Done():
			return fmt.Errorf("the subscribers did not attach: %w", ctx.Err())
		}
	}

	client, err := artemis.Dial(ctx, []string{cfg.URL}, nil)
	if err != nil {
		return err
	}
	defer client.Close(context.Background())
	pub, err := client.TopicPublisher(ctx, topic)
	if err != nil {
		return err
	}
	published := []struct {
		urn   string
		order int
	}{{URNCreated, 1001}, {URNCreated, 1002}, {URNCreated, FailingOrder}, {URNCreated, 1004}, {URNCancelled, 1002}}
	for _, p := range published {
		if _, err := pub.Publish(ctx, artemis.Job(p.urn, Order{OrderID: p.order})); err != nil {
			return err
		}
		fmt.Fprintf(out, "published %-27s order %d\n", p.urn, p.order)
	}

	// Billing gets all five events, shipping the four order-created ones.
	var seen []event
	for len(seen) < 5+4 {
		select {
		case ev := <-events:
			seen = append(seen, ev)
		case err := <-errs:
			return err
		case <-ctx.Done():
			return fmt.Errorf("gave up after %d of 9 handler calls: %w", len(seen), ctx.Err())
		}
	}
	sort.SliceStable(seen, func(i, j int) bool {
		if seen[i].service != seen[j].service {
			return seen[i].service < seen[j].service
		}
		return seen[i].order < seen[j].order
	})
	for _, ev := range seen {
		fmt.Fprintf(out, "%-8s order %d  %-27s %s (%s)\n", ev.service, ev.order, ev.urn, ev.outcome, ev.instance)
	}
	stop()
	wg.Wait()

	return report(ctx, cfg.URL, billing+".dlq", out)
}

// report browses the dead-letter queue (consuming nothing) and prints its
// record's dead_letter block.
func report(ctx context.Context, url, dlq string, out io.Writer) error {
	conn, sess, err := broker.Session(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close()
	r, err := queuelink.Browser(ctx, sess, dlq)
	if err != nil {
		return err
	}
	defer r.Close(context.WithoutCancel(ctx))
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msg, err := r.Receive(rctx, nil)
	if err != nil {
		return fmt.Errorf("no record on %s: %w", dlq, err)
	}
	var rec struct {
		Data       Order               `json:"data"`
		DeadLetter *artemis.DeadLetter `json:"dead_letter"`
	}
	if err := json.Unmarshal([]byte(broker.BodyText(msg)), &rec); err != nil || rec.DeadLetter == nil {
		return fmt.Errorf("the record on %s is not a dead-letter record (%v)", dlq, err)
	}
	fmt.Fprintf(out, "%s holds order %d: reason %s, original_queue %s\n", dlq, rec.Data.OrderID, rec.DeadLetter.Reason, rec.DeadLetter.OriginalQueue)
	return nil
}
