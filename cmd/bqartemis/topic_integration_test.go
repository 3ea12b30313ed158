package main

import (
	"context"
	"errors"
	"strconv"
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
	subscribeAndPublish(t, b.URL, topic, map[string][]artemis.ConsumerOption{live: {artemis.WithNonDurable()}, keep: nil}, "", 0)
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

// TestIntegrationStatsOfATopicShowsEachSubscriptionsDLQ: stats -address
// shows each subscription's dead-letter queue with it (the row after it
// in the table, its "dlq" object in -json), with the DLQ's own counters.
// billing (durable) fails every event: its billing.dlq holds them.
// shipping (durable) handles them: its DLQ, which the library attaches
// with the subscription, is shown empty. live (non-durable) handles them:
// it has no DLQ (made only at a first dead letter), shows none, and stats
// does not create one by looking.
func TestIntegrationStatsOfATopicShowsEachSubscriptionsDLQ(t *testing.T) {
	env := brokerEnv(t)
	b := brokertest.Require(t)
	topic := brokertest.Queue(t)
	billing, shipping, live := topic+".billing", topic+".shipping", topic+".live"
	liveQueue := live + ":shared-volatile:global"
	const events = 2
	subscribeAndPublish(t, b.URL, topic, map[string][]artemis.ConsumerOption{billing: nil, shipping: nil, live: {artemis.WithNonDurable()}}, billing, events)

	// The dead letters are written while billing's deliveries are settled:
	// read until they are all there, within a bound.
	var subs []map[string]any
	deadline := time.Now().Add(30 * time.Second)
	for {
		subs = jsonLines(t, cli(t, env, "stats", "-address", topic, "-json"))
		if len(subs) == 3 {
			if d, ok := subs[0]["dlq"].(map[string]any); ok && d["messages"] == float64(events) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats -address %s: %v, want billing's DLQ with %d messages", topic, subs, events)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for i, want := range []struct {
		q         string
		dlq       string // "" for none
		dead      float64
		dlqExists bool
	}{{billing, billing + ".dlq", events, true}, {liveQueue, "", 0, false}, {shipping, shipping + ".dlq", 0, true}} {
		row := subs[i]
		if row["queue"] != want.q || row["address"] != topic || row["routing"] != "multicast" {
			t.Errorf("stats -address %s -json, line %d: %v, want subscription %s", topic, i, row, want.q)
			continue
		}
		d, has := row["dlq"].(map[string]any)
		if want.dlq == "" {
			if _, present := row["dlq"]; present {
				t.Errorf("%s: %v, want no DLQ", want.q, row["dlq"])
			}
			if brokerHasQueue(t, env, want.q+".dlq") {
				t.Errorf("stats -address created %s.dlq", want.q)
			}
			continue
		}
		if !has || d["queue"] != want.dlq || d["messages"] != want.dead || d["added"] != want.dead || d["address"] != want.dlq || d["routing"] != "anycast" {
			t.Errorf("%s: dlq %v, want %s with %v messages, on an anycast address of its own", want.q, row["dlq"], want.dlq, want.dead)
		}
	}

	// The table: each DLQ is the row right after its subscription.
	var rows [][]string
	for _, l := range strings.Split(strings.TrimSpace(cli(t, env, "stats", "-address", topic)), "\n")[1:] {
		rows = append(rows, strings.Fields(l))
	}
	wantRows := [][2]string{{billing, "0"}, {billing + ".dlq", strconv.Itoa(events)}, {liveQueue, "0"}, {shipping, "0"}, {shipping + ".dlq", "0"}}
	if len(rows) != len(wantRows) {
		t.Fatalf("stats -address %s: %d rows, want %d: %v", topic, len(rows), len(wantRows), rows)
	}
	for i, want := range wantRows {
		if rows[i][0] != want[0] || rows[i][1] != want[1] {
			t.Errorf("stats -address %s, row %d: %v, want %s with %s messages", topic, i, rows[i], want[0], want[1])
		}
	}
}

// TestIntegrationStatsOfAMissingAddress: stats -address of an address the
// broker does not have says so by name, exits 1, and creates nothing.
func TestIntegrationStatsOfAMissingAddress(t *testing.T) {
	env := brokerEnv(t)
	topic := brokertest.Queue(t)
	out, errOut, code := runCLI(t, env, "", "stats", "-address", topic)
	if code != exitFailed || !strings.Contains(errOut, "address "+topic+" does not exist on the broker") || out != "" {
		t.Fatalf("stats -address %s: exit %d, %q%q", topic, code, out, errOut)
	}
	if _, errOut, _ := runCLI(t, env, "", "stats", "-address", topic); !strings.Contains(errOut, "does not exist") {
		t.Errorf("the address was created by looking: %q", errOut)
	}
}

// subscribeAndPublish subscribes a consumer of urnFail to topic for each
// of subs (with its options), over one Client dialled to url, waits until
// all are attached, then publishes events events to the topic. The
// handler of the subscription named failing fails every event at once
// (max tries 1: dead-lettered), the others handle them. The subscriptions
// run until the test ends.
func subscribeAndPublish(t *testing.T, url, topic string, subs map[string][]artemis.ConsumerOption, failing string, events int) {
	t.Helper()
	attached := make(chan struct{}, len(subs))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	c, err := artemis.Dial(ctx, []string{url}, &artemis.ClientOptions{OnEvent: func(ev artemis.ConnectionEvent) {
		if ev.Kind == artemis.EventConsumerAttached {
			attached <- struct{}{}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	var wg sync.WaitGroup
	sctx, stop := context.WithCancel(ctx)
	t.Cleanup(func() { stop(); wg.Wait() })
	for sub, opts := range subs {
		handler := func(context.Context, *artemis.Envelope, *amqp.Message) error { return nil }
		if sub == failing {
			handler = func(context.Context, *artemis.Envelope, *amqp.Message) error { return errors.New("ledger down") }
		}
		opts = append(opts, artemis.WithMaxTries(1), artemis.WithOnError(func(context.Context, error, *artemis.Envelope, *amqp.Message) {}))
		cons, err := artemis.NewConsumer(artemis.Handlers{urnFail: handler}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if err := c.Subscribe(sctx, topic, sub, cons); err != nil {
				t.Errorf("Subscribe %s: %v", sub, err)
			}
		})
	}
	for range subs {
		select {
		case <-attached:
		case <-ctx.Done():
			t.Fatal("the subscriptions did not attach")
		}
	}
	if events == 0 {
		return
	}
	pub, err := c.TopicPublisher(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for i := range events {
		if _, err := pub.Publish(ctx, artemis.Job(urnFail, map[string]any{"n": i})); err != nil {
			t.Fatal(err)
		}
	}
}
