package integration_test

// Publish-subscribe on multicast addresses (docs/pubsub.md): every
// subscription queue gets each event once, the instances of one service
// share theirs, a subscription dead-letters to its own queue and a redrive
// goes back to it alone, a durable subscription keeps what was published
// while no consumer ran, and selectors filter on the broker.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
)

const (
	urnOrderCreated = "urn:babel:orders:created"
	urnOrderShipped = "urn:babel:orders:shipped"
)

// topicEvents is how many events the three-service test publishes:
// 10,000, or BQ_TOPIC_EVENTS (fewer with -short: 1,000).
func topicEvents(t *testing.T) int {
	if v := os.Getenv("BQ_TOPIC_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "BQ_TOPIC_EVENTS")
		return n
	}
	if testing.Short() {
		return 1000
	}
	return 10000
}

// subscriber is one running Client.Subscribe, on a Client of its own (an
// instance of a service).
type subscriber struct {
	c      *artemis.Client
	cancel context.CancelFunc
	done   chan error
}

// subscribe starts cons on topic's subscription sub on a Client of its own
// and returns once the receiver is attached (the subscription queue
// exists from then on).
func subscribe(t *testing.T, url, topic, sub string, cons *artemis.Consumer) *subscriber {
	t.Helper()
	attached := make(chan struct{}, 1)
	c, err := artemis.Dial(context.Background(), []string{url}, &artemis.ClientOptions{OnEvent: func(ev artemis.ConnectionEvent) {
		if ev.Kind == artemis.EventConsumerAttached {
			select {
			case attached <- struct{}{}:
			default:
			}
		}
	}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	s := &subscriber{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- c.Subscribe(ctx, topic, sub, cons) }()
	t.Cleanup(func() { s.stop(t) })
	select {
	case <-attached:
	case err := <-s.done:
		s.done <- err
		t.Fatalf("Subscribe(%s, %s) ended: %v", topic, sub, err)
	case <-time.After(arrival):
		t.Fatalf("Subscribe(%s, %s) did not attach", topic, sub)
	}
	return s
}

// stop ends the subscriber (its handlers in flight settle first) and
// closes its Client; a second call does nothing.
func (s *subscriber) stop(t *testing.T) {
	t.Helper()
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	select {
	case err := <-s.done:
		assert.NoError(t, err, "Subscribe's result")
	case <-time.After(arrival):
		t.Error("Subscribe did not return")
	}
	_ = s.c.Close(context.Background())
}

// topicPublisher is a Client's TopicPublisher on topic; both end with the
// test.
func topicPublisher(t *testing.T, url, topic string) *artemis.ClientPublisher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	c, err := artemis.Dial(ctx, []string{url}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	pub, err := c.TopicPublisher(ctx, topic)
	require.NoError(t, err)
	return pub
}

// tally counts who handled which event.
type tally struct {
	mu   sync.Mutex
	seen map[string]map[string]int // service -> meta.id -> handler calls
	n    map[string]int            // service -> calls
	ch   chan struct{}             // a call was counted
}

func newTally() *tally {
	return &tally{seen: map[string]map[string]int{}, n: map[string]int{}, ch: make(chan struct{}, 1)}
}

func (ta *tally) handler(service string, fail func(*artemis.Envelope) error) artemis.HandlerFunc {
	return func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		if fail != nil {
			if err := fail(env); err != nil {
				return err
			}
		}
		ta.mu.Lock()
		if ta.seen[service] == nil {
			ta.seen[service] = map[string]int{}
		}
		ta.seen[service][env.Meta.ID]++
		ta.n[service]++
		ta.mu.Unlock()
		select {
		case ta.ch <- struct{}{}:
		default:
		}
		return nil
	}
}

func (ta *tally) count(service string) int {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	return ta.n[service]
}

// await waits until service has handled want events (and fails the test
// if that does not come within bound).
func (ta *tally) await(t *testing.T, service string, want int, bound time.Duration) {
	t.Helper()
	deadline := time.After(bound)
	for ta.count(service) < want {
		select {
		case <-ta.ch:
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%s handled %d events, want %d", service, ta.count(service), want)
		}
	}
}

func TestIntegrationTopicThreeServicesEachHandleEveryEventOnce(t *testing.T) {
	b := brokertest.Require(t)
	topic := brokertest.Queue(t)
	events := topicEvents(t)
	services := []string{"billing", "shipping", "analytics"}
	ta := newTally()
	for _, svc := range services {
		for range 2 {
			cons, err := artemis.NewConsumer(artemis.Handlers{urnOrderCreated: ta.handler(svc, nil)}, artemis.WithConcurrency(4))
			require.NoError(t, err)
			subscribe(t, b.URL, topic, topic+"."+svc, cons)
		}
	}

	pub := topicPublisher(t, b.URL, topic)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	ids := make(map[string]bool, events)
	receipts := make([]*artemis.Receipt, 0, events)
	for i := range events {
		r, err := pub.PublishWithReceipt(ctx, artemis.Job(urnOrderCreated, map[string]any{"n": i}))
		require.NoError(t, err)
		receipts = append(receipts, r)
	}
	for _, r := range receipts {
		require.NoError(t, r.Wait(ctx))
		ids[r.ID()] = true
	}
	published := time.Since(start)
	for _, svc := range services {
		ta.await(t, svc, events, 5*time.Minute)
	}
	t.Logf("%d events published in %v, handled by 3 services x 2 instances in %v", events, published.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	// Nothing more comes: no event is handled twice by a service.
	time.Sleep(quiet)
	ta.mu.Lock()
	defer ta.mu.Unlock()
	for _, svc := range services {
		assert.Len(t, ta.seen[svc], events, "%s handled every event", svc)
		for id, n := range ta.seen[svc] {
			if !ids[id] || n != 1 {
				t.Errorf("%s handled %s %d times (published: %v)", svc, id, n, ids[id])
			}
		}
	}
}

// errDeclined is what the failing subscriber's handler returns.
var errDeclined = errors.New("declined")

func TestIntegrationTopicSubscriptionDeadLettersToItsOwnQueueAndARedriveReturnsToItAlone(t *testing.T) {
	b, conn, topic := onBroker(t)
	billing, shipping := topic+".billing", topic+".shipping"
	ta := newTally()
	failing := true
	var mu sync.Mutex
	failOdd := func(env *artemis.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		var d struct{ N int }
		if err := json.Unmarshal(env.Data, &d); err != nil {
			return err
		}
		if failing && d.N%2 == 1 {
			return errDeclined
		}
		return nil
	}
	bc, err := artemis.NewConsumer(artemis.Handlers{urnOrderCreated: ta.handler("billing", failOdd)}, artemis.WithMaxTries(1))
	require.NoError(t, err)
	sc, err := artemis.NewConsumer(artemis.Handlers{urnOrderCreated: ta.handler("shipping", nil)})
	require.NoError(t, err)
	subscribe(t, b.URL, topic, billing, bc)
	subscribe(t, b.URL, topic, shipping, sc)

	pub := topicPublisher(t, b.URL, topic)
	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	const events = 10
	for i := range events {
		_, err := pub.Publish(ctx, artemis.Job(urnOrderCreated, map[string]any{"n": i}))
		require.NoError(t, err)
	}
	ta.await(t, "shipping", events, arrival)
	ta.await(t, "billing", events/2, arrival)

	// The five failures are on billing's own DLQ, each naming the
	// subscription queue, fully qualified, as its original queue.
	var records []*artemis.Envelope
	for range events / 2 {
		rec := receiveOn(t, conn, billing+".dlq", nil)
		env, err := artemis.Decode([]byte(valueString(t, rec)))
		require.NoError(t, err)
		require.NotNil(t, env.DeadLetter)
		assert.Equal(t, topic+"::"+billing, env.DeadLetter.OriginalQueue)
		records = append(records, env)
	}
	assertEmpty(t, conn, billing+".dlq")
	assertEmpty(t, conn, shipping+".dlq")
	assertEmpty(t, conn, topic+".dlq")

	// A redrive as bqartemis does it: each record, attempts 0 and no
	// dead_letter block, sent to its original_queue (address::queue, an
	// anycast send to that one queue). Billing, healed, handles them; shipping
	// never sees them again.
	mu.Lock()
	failing = false
	mu.Unlock()
	rc, err := artemis.Dial(ctx, []string{b.URL}, nil)
	require.NoError(t, err)
	defer rc.Close(context.Background())
	back, err := rc.Publisher(ctx, records[0].DeadLetter.OriginalQueue)
	require.NoError(t, err)
	for _, env := range records {
		env.DeadLetter, env.Attempts = nil, 0
		_, err := back.Publish(ctx, env)
		require.NoError(t, err)
	}
	ta.await(t, "billing", events, arrival)
	time.Sleep(quiet)
	assert.Equal(t, events, ta.count("shipping"), "shipping handled each event once, the redriven ones not again")
	assert.Equal(t, events, ta.count("billing"))
	ta.mu.Lock()
	defer ta.mu.Unlock()
	for _, svc := range []string{"billing", "shipping"} {
		assert.Len(t, ta.seen[svc], events, svc)
		for id, n := range ta.seen[svc] {
			assert.Equal(t, 1, n, "%s handled %s", svc, id)
		}
	}
}

func TestIntegrationTopicDurableSubscriptionKeepsWhatWasPublishedWhileDown(t *testing.T) {
	b := brokertest.Require(t)
	topic := brokertest.Queue(t)
	sub := topic + ".audit"
	ta := newTally()
	cons, err := artemis.NewConsumer(artemis.Handlers{urnOrderCreated: ta.handler("audit", nil)})
	require.NoError(t, err)
	first := subscribe(t, b.URL, topic, sub, cons)
	pub := topicPublisher(t, b.URL, topic)
	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	_, err = pub.Publish(ctx, artemis.Job(urnOrderCreated, map[string]any{"n": -1}))
	require.NoError(t, err)
	ta.await(t, "audit", 1, arrival)
	first.stop(t)

	const whileDown = 25
	for i := range whileDown {
		_, err := pub.Publish(ctx, artemis.Job(urnOrderCreated, map[string]any{"n": i}))
		require.NoError(t, err)
	}
	subscribe(t, b.URL, topic, sub, cons)
	ta.await(t, "audit", 1+whileDown, arrival)
	time.Sleep(quiet)
	assert.Equal(t, 1+whileDown, ta.count("audit"), "each event once")
}

func TestIntegrationTopicPublishWithoutSubscribersIsAcceptedAndDropped(t *testing.T) {
	b := brokertest.Require(t)
	topic := brokertest.Queue(t)
	pub := topicPublisher(t, b.URL, topic)
	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	_, err := pub.Publish(ctx, artemis.Job(urnOrderCreated, map[string]any{"n": 0}))
	require.NoError(t, err, "no subscriber is not an error")

	// A subscription made afterwards does not get it.
	ta := newTally()
	cons, err := artemis.NewConsumer(artemis.Handlers{urnOrderCreated: ta.handler("late", nil)})
	require.NoError(t, err)
	subscribe(t, b.URL, topic, topic+".late", cons)
	_, err = pub.Publish(ctx, artemis.Job(urnOrderCreated, map[string]any{"n": 1}))
	require.NoError(t, err)
	ta.await(t, "late", 1, arrival)
	time.Sleep(quiet)
	assert.Equal(t, 1, ta.count("late"), "only what was published once it was subscribed")
}

func TestIntegrationTopicSelectorsFilterOnTheBroker(t *testing.T) {
	b, conn, topic := onBroker(t)
	ta := newTally()
	newCons := func(svc string, h artemis.Handlers, opts ...artemis.ConsumerOption) *artemis.Consumer {
		for urn := range h {
			h[urn] = ta.handler(svc, nil)
		}
		// Anything delivered that has no handler would be dead-lettered:
		// the DLQs stay empty below.
		c, err := artemis.NewConsumer(h, append([]artemis.ConsumerOption{artemis.WithUnknownURN(artemis.UnknownURNDeadLetter)}, opts...)...)
		require.NoError(t, err)
		return c
	}
	eu, created, all := topic+".eu", topic+".created", topic+".all"
	subscribe(t, b.URL, topic, eu, newCons("eu", artemis.Handlers{urnOrderCreated: nil, urnOrderShipped: nil}, artemis.WithSelector("region = 'eu' AND bq_source_lang = 'go'")))
	subscribe(t, b.URL, topic, created, newCons("created", artemis.Handlers{urnOrderCreated: nil}, artemis.WithOnlyHandledURNs()))
	subscribe(t, b.URL, topic, all, newCons("all", artemis.Handlers{urnOrderCreated: nil, urnOrderShipped: nil}))

	pub := topicPublisher(t, b.URL, topic)
	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	for i, ev := range []struct{ urn, region string }{
		{urnOrderCreated, "eu"}, {urnOrderShipped, "eu"}, {urnOrderCreated, "us"}, {urnOrderShipped, "us"}, {urnOrderCreated, "eu"},
	} {
		_, err := pub.Publish(ctx, artemis.Job(ev.urn, map[string]any{"n": i}), artemis.WithHeaders(map[string]string{"region": ev.region}))
		require.NoError(t, err)
	}
	ta.await(t, "all", 5, arrival)
	ta.await(t, "eu", 3, arrival)
	ta.await(t, "created", 3, arrival)
	time.Sleep(quiet)
	assert.Equal(t, 5, ta.count("all"), "the excluded messages still reach the others")
	assert.Equal(t, 3, ta.count("eu"), "region = 'eu' only")
	assert.Equal(t, 3, ta.count("created"), "its handlers' URN only")
	for _, q := range []string{eu, created, all} {
		assertEmpty(t, conn, q+".dlq")
	}
	if st, err := statOrSkip(t, b, created); err == nil {
		assert.Equal(t, 3, st.MessagesAdded, "the shipped events never entered the created subscription")
		assert.Equal(t, 0, st.MessageCount, "nothing is left on it")
	}

	// A selector the broker refuses ends Subscribe at once with a clear error.
	ctx, cancel = context.WithTimeout(context.Background(), arrival)
	defer cancel()
	c, err := artemis.Dial(ctx, []string{b.URL}, nil)
	require.NoError(t, err)
	defer c.Close(context.Background())
	err = c.Subscribe(ctx, topic, topic+".bad", newCons("bad", artemis.Handlers{urnOrderCreated: nil}, artemis.WithSelector("region = = 'eu'")))
	require.ErrorIs(t, err, artemis.ErrInvalidConfig)
	require.NoError(t, ctx.Err(), "at once, not retried")
	t.Logf("refused: %v", err)
}

func TestIntegrationQueueSelectorLeavesTheRestToOtherConsumers(t *testing.T) {
	b, conn, q := onBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	c, err := artemis.Dial(ctx, []string{b.URL}, nil)
	require.NoError(t, err)
	defer c.Close(context.Background())
	pub, err := c.Publisher(ctx, q)
	require.NoError(t, err)
	for i := range 6 {
		_, err := pub.Publish(ctx, artemis.Job(urnOrderCreated, map[string]any{"n": i}), artemis.WithHeaders(map[string]string{"tier": fmt.Sprint(i % 2)}))
		require.NoError(t, err)
	}
	ta := newTally()
	cons, err := artemis.NewConsumer(artemis.Handlers{urnOrderCreated: ta.handler("tier1", nil)}, artemis.WithSelector("tier = '1'"))
	require.NoError(t, err)
	cctx, ccancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Consume(cctx, q, cons) }()
	ta.await(t, "tier1", 3, arrival)
	time.Sleep(quiet)
	ccancel()
	require.NoError(t, <-done)
	assert.Equal(t, 3, ta.count("tier1"), "the selector's three")
	left := conn.Drain(q, "")
	assert.Len(t, left, 3, "the three it excluded stay on the queue for the others")
	for _, m := range left {
		assert.Equal(t, "0", m.ApplicationProperties["tier"])
	}
}

// statOrSkip is the queue's statistics from the broker's CLI, or an error
// (logged) when the CLI is not available here.
func statOrSkip(t *testing.T, b *brokertest.Broker, q string) (brokertest.QueueStat, error) {
	t.Helper()
	if !b.HasCLI() {
		t.Logf("no Artemis CLI: the queue statistics of %s are not checked", q)
		return brokertest.QueueStat{}, errors.New("no CLI")
	}
	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	st, err := b.Stat(ctx, q)
	require.NoError(t, err)
	return st, nil
}

func TestIntegrationTopicSubscriptionWithAnotherSelectorIsRefused(t *testing.T) {
	b := brokertest.Require(t)
	topic := brokertest.Queue(t)
	sub := topic + ".eu"
	cons, err := artemis.NewConsumer(artemis.Handlers{urnOrderCreated: newTally().handler("eu", nil)}, artemis.WithSelector("region = 'eu'"))
	require.NoError(t, err)
	subscribe(t, b.URL, topic, sub, cons).stop(t)

	// The same subscription with another selector: Artemis refuses the
	// attach (and closes the connection); Subscribe ends at once, and the
	// Client's publisher goes on over a new connection.
	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	c, err := artemis.Dial(ctx, []string{b.URL}, nil)
	require.NoError(t, err)
	defer c.Close(context.Background())
	pub, err := c.TopicPublisher(ctx, topic)
	require.NoError(t, err)
	us, err := artemis.NewConsumer(artemis.Handlers{urnOrderCreated: newTally().handler("eu", nil)}, artemis.WithSelector("region = 'us'"))
	require.NoError(t, err)
	err = c.Subscribe(ctx, topic, sub, us)
	require.ErrorIs(t, err, artemis.ErrInvalidConfig)
	require.NoError(t, ctx.Err(), "at once, not retried")
	assert.Contains(t, err.Error(), "another selector")
	t.Logf("refused: %v", err)
	_, err = pub.Publish(ctx, artemis.Job(urnOrderCreated, map[string]any{"n": 1}), artemis.WithHeaders(map[string]string{"region": "eu"}))
	require.NoError(t, err, "the Client's other links recover")

	// The same selector, or none, is taken.
	ta := newTally()
	cons2, err := artemis.NewConsumer(artemis.Handlers{urnOrderCreated: ta.handler("eu", nil)})
	require.NoError(t, err)
	subscribe(t, b.URL, topic, sub, cons2)
	ta.await(t, "eu", 1, arrival)
}
