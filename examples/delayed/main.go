// Command delayed publishes a message with WithDelay and shows it arriving
// after the delay: the library sets Artemis's x-opt-delivery-time
// annotation (now + delay, Unix ms), and the broker holds the message
// until then. A message published right after it, without a delay,
// arrives first.
//
//	cd examples && go run ./delayed [-delay 3s] [-queue name]
//
// The broker is ARTEMIS_URL (default amqp://babel:babel@127.0.0.1:5672).
// Without -queue a fresh queue name is used.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/broker"
)

// The URNs of the two messages.
const (
	URNReminder = "urn:babel:reminders:due"
	URNNow      = "urn:babel:reminders:created"
)

type config struct {
	broker.Config // its Timeout comes on top of the delay
	Delay         time.Duration
}

func main() {
	var cfg config
	flag.DurationVar(&cfg.Delay, "delay", 3*time.Second, "how long Artemis holds the delayed message")
	broker.Main("delayed", &cfg.Config, broker.Flags{Timeout: 30 * time.Second, TimeoutHelp: "give up this long after the delay has passed"},
		func(ctx context.Context, out io.Writer) error { return run(ctx, cfg, out) })
}

// arrival is a message as the handler saw it.
type arrival struct {
	urn string
	id  string
	at  time.Time
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Delay+cfg.Timeout)
	defer cancel()
	fmt.Fprintf(out, "delayed example: queue %s, broker %s\n", cfg.Queue, broker.Redact(cfg.URL))

	client, pub, err := broker.Connect(ctx, cfg.URL, cfg.Queue)
	if err != nil {
		return err
	}
	defer client.Close(context.Background())

	// The consumer is listening before anything is published, so the
	// arrival times are the broker's doing, not ours.
	arrivals := make(chan arrival, 2)
	handle := func(ctx context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		select {
		case arrivals <- arrival{urn: env.URN, id: env.Meta.ID, at: time.Now()}:
		case <-ctx.Done():
		}
		return nil
	}
	cons, err := broker.Consume(ctx, client, cfg.Queue, artemis.Handlers{URNReminder: handle, URNNow: handle})
	if err != nil {
		return err
	}

	// Each publish is timed from just before the call: the library reads
	// the clock for x-opt-delivery-time inside it.
	sent := map[string]time.Time{}
	start := time.Now()
	delayedID, err := pub.Publish(ctx, artemis.Job(URNReminder, map[string]any{"reminder_id": 7, "text": "call the customer back"}), artemis.WithDelay(cfg.Delay))
	if err != nil {
		return err
	}
	sent[delayedID] = start
	fmt.Fprintf(out, "%s  published %s with WithDelay(%v)\n", clock(start), URNReminder, cfg.Delay)
	start = time.Now()
	nowID, err := pub.Publish(ctx, artemis.Job(URNNow, map[string]any{"reminder_id": 7}))
	if err != nil {
		return err
	}
	sent[nowID] = start
	fmt.Fprintf(out, "%s  published %s without a delay\n", clock(start), URNNow)

	for got := 0; got < 2; got++ {
		select {
		case a := <-arrivals:
			took := a.at.Sub(sent[a.id]).Round(time.Millisecond)
			fmt.Fprintf(out, "%s  received %s, %v after its publish\n", clock(a.at), a.urn, took)
			if a.id == delayedID {
				fmt.Fprintf(out, "measured delay: %v (asked for %v)\n", took, cfg.Delay)
			}
		case err := <-cons.Done():
			return broker.Early(err)
		case <-ctx.Done():
			_ = cons.Stop()
			return fmt.Errorf("gave up waiting for the messages: %w", ctx.Err())
		}
	}
	return cons.Stop()
}

func clock(t time.Time) string { return t.Format("15:04:05.000") }
