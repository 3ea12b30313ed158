package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
)

// TestIntegrationRedriveOfASubscription: a subscription's dead letters are
// on <subscription>.dlq with original_queue topic::subscription, and
// `redrive` puts them back on that subscription alone: the other
// subscription on the topic never sees them again.
func TestIntegrationRedriveOfASubscription(t *testing.T) {
	env := brokerEnv(t)
	b := brokertest.Require(t)
	topic := brokertest.Queue(t)
	billing, shipping := topic+".billing", topic+".shipping"

	var mu sync.Mutex
	calls := map[string]int{}
	failing := true
	got := make(chan struct{}, 64)
	handler := func(svc string) artemis.HandlerFunc {
		return func(context.Context, *artemis.Envelope, *amqp.Message) error {
			mu.Lock()
			defer mu.Unlock()
			calls[svc]++
			got <- struct{}{}
			if svc == "billing" && failing {
				return errors.New("ledger down")
			}
			return nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := artemis.Dial(ctx, []string{b.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var wg sync.WaitGroup
	sctx, stop := context.WithCancel(ctx)
	defer func() { stop(); wg.Wait() }()
	for _, svc := range []string{"billing", "shipping"} {
		cons, err := artemis.NewConsumer(artemis.Handlers{urnFail: handler(svc)}, artemis.WithMaxTries(1),
			artemis.WithOnError(func(context.Context, error, *artemis.Envelope, *amqp.Message) {}))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if err := c.Subscribe(sctx, topic, topic+"."+svc, cons); err != nil {
				t.Errorf("Subscribe %s: %v", svc, err)
			}
		})
	}
	count := func(svc string) int {
		mu.Lock()
		defer mu.Unlock()
		return calls[svc]
	}
	await := func(svc string, n int) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for count(svc) < n {
			select {
			case <-got:
			case <-time.After(100 * time.Millisecond):
			case <-deadline:
				t.Fatalf("%s: %d calls, want %d", svc, count(svc), n)
			}
		}
	}
	// Both subscription queues exist before the publish (a publish with no
	// subscription is dropped).
	deadline := time.Now().Add(30 * time.Second)
	for !brokerHasQueue(t, env, billing) || !brokerHasQueue(t, env, shipping) {
		if time.Now().After(deadline) {
			t.Fatal("the subscription queues were not created")
		}
		time.Sleep(200 * time.Millisecond)
	}
	pub, err := c.TopicPublisher(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	const events = 3
	for i := range events {
		if _, err := pub.Publish(ctx, artemis.Job(urnFail, map[string]any{"n": i})); err != nil {
			t.Fatal(err)
		}
	}
	await("billing", events)
	await("shipping", events)

	dlq := billing + ".dlq"
	dry := cli(t, env, "redrive", dlq, "-dry-run")
	if n := strings.Count(dry, "-> "+topic+"::"+billing+" "); n != events {
		t.Fatalf("redrive -dry-run: %d records to %s::%s, want %d:\n%s", n, topic, billing, events, dry)
	}
	mu.Lock()
	failing = false
	mu.Unlock()
	out := cli(t, env, "redrive", dlq)
	if !strings.Contains(out, "done: 3 moved, 0 kept") {
		t.Fatalf("redrive:\n%s", out)
	}
	await("billing", 2*events)
	time.Sleep(1500 * time.Millisecond)
	if n := count("shipping"); n != events {
		t.Errorf("shipping handled %d, want %d: a redrive to a subscription reached another one", n, events)
	}
	if n := count("billing"); n != 2*events {
		t.Errorf("billing handled %d, want %d", n, 2*events)
	}
	if brokerHasQueue(t, env, topic+".dlq") {
		t.Error("a dead-letter queue of the topic was created")
	}
	for q, want := range map[string]float64{shipping + ".dlq": 0, dlq: 0, billing: 0, shipping: 0} {
		if st := statOf(t, env, q); st["messages"] != want {
			t.Errorf("stats %s: %v, want %v messages", q, st, want)
		}
	}
	if st := statOf(t, env, dlq); st["added"] != float64(events) || st["routing"] != "anycast" || st["address"] != dlq {
		t.Errorf("stats %s: %v, want %d added, on an anycast address of its own", dlq, st, events)
	}

	// stats -address lists the topic's subscriptions.
	subs := jsonLines(t, cli(t, env, "stats", "-address", topic, "-json"))
	if len(subs) != 2 {
		t.Fatalf("stats -address %s: %v, want the 2 subscriptions", topic, subs)
	}
	// Billing's queue got each event and the redriven copies; shipping's
	// each event only.
	for i, want := range []struct {
		q     string
		added float64
	}{{billing, 2 * events}, {shipping, events}} {
		if subs[i]["queue"] != want.q || subs[i]["address"] != topic || subs[i]["routing"] != "multicast" || subs[i]["durable"] != true || subs[i]["added"] != want.added {
			t.Errorf("stats -address %s, row %d: %v, want %s, multicast, durable, %v added", topic, i, subs[i], want.q, want.added)
		}
	}
}

// TestIntegrationStatsOfANonDurableSubscription: stats -address lists a
// non-durable subscription's queue (a temporary queue on the broker, which
// stats without arguments leaves out) beside the durable ones, as not
// durable, with its consumers.
func TestIntegrationStatsOfANonDurableSubscription(t *testing.T) {
	env := brokerEnv(t)
	b := brokertest.Require(t)
	topic := brokertest.Queue(t)
	live, keep := topic+".live", topic+".keep"
	attached := make(chan struct{}, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := artemis.Dial(ctx, []string{b.URL}, &artemis.ClientOptions{OnEvent: func(ev artemis.ConnectionEvent) {
		if ev.Kind == artemis.EventConsumerAttached {
			attached <- struct{}{}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	var wg sync.WaitGroup
	sctx, stop := context.WithCancel(ctx)
	defer func() { stop(); wg.Wait() }()
	for sub, opts := range map[string][]artemis.ConsumerOption{live: {artemis.WithNonDurable()}, keep: nil} {
		cons, err := artemis.NewConsumer(artemis.Handlers{urnFail: func(context.Context, *artemis.Envelope, *amqp.Message) error { return nil }}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if err := c.Subscribe(sctx, topic, sub, cons); err != nil {
				t.Errorf("Subscribe %s: %v", sub, err)
			}
		})
	}
	for range 2 {
		select {
		case <-attached:
		case <-ctx.Done():
			t.Fatal("the subscriptions did not attach")
		}
	}
	subs := jsonLines(t, cli(t, env, "stats", "-address", topic, "-json"))
	if len(subs) != 2 {
		t.Fatalf("stats -address %s: %v, want the 2 subscriptions", topic, subs)
	}
	for i, want := range []struct {
		q       string
		durable bool
	}{{keep, true}, {live + ":shared-volatile:global", false}} {
		if subs[i]["queue"] != want.q || subs[i]["routing"] != "multicast" || subs[i]["durable"] != want.durable || subs[i]["consumers"] != float64(1) {
			t.Errorf("stats -address %s, row %d: %v, want %s, multicast, durable %t, 1 consumer", topic, i, subs[i], want.q, want.durable)
		}
	}
}
