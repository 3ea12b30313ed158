package integration_test

// Non-durable subscriptions (WithNonDurable): a shared queue
// that lives only while a consumer is attached to it, receives while it
// is, and leaves nothing behind but its dead letters.

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
)

// brokerQueue is one row of `artemis queue stat --json`.
type brokerQueue struct {
	Name, Address, RoutingType, Durable, Temporary, Filter string
	ConsumerCount, MessageCount                            string
}

// queuesNamed lists the broker's queues whose name contains part, through
// the CLI (never an attach, which would create the queue).
func queuesNamed(t *testing.T, b *brokertest.Broker, part string) []brokerQueue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.CLITimeout)
	defer cancel()
	out, err := b.CLI(ctx, "queue stat", "--json", "--field", "NAME", "--operation", "CONTAINS", "--value", part)
	require.NoError(t, err)
	start := strings.Index(out, "{")
	require.GreaterOrEqual(t, start, 0, "no JSON in %s", out)
	var doc struct {
		Data []brokerQueue `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(out[start:]), &doc), out)
	return doc.Data
}

// awaitNoQueue waits until the broker has no queue whose name contains
// part, and returns how many looks that took (each a CLI run of seconds).
func awaitNoQueue(t *testing.T, b *brokertest.Broker, part string) int {
	t.Helper()
	start := time.Now()
	for looks := 1; ; looks++ {
		left := queuesNamed(t, b, part)
		if len(left) == 0 {
			return looks
		}
		if time.Since(start) > arrival {
			t.Fatalf("queues of %s still on the broker after %v: %+v", part, arrival, left)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestIntegrationTopicNonDurableSubscriptionLivesOnlyWhileAttached(t *testing.T) {
	b := brokertest.Require(t)
	b.RequireCLI(t)
	topic := brokertest.Queue(t)
	live, audit := topic+".live", topic+".audit"
	volatileQueue := live + ":shared-volatile:global"
	ta := newTally()
	newCons := func(svc string, opts ...artemis.ConsumerOption) *artemis.Consumer {
		c, err := artemis.NewConsumer(artemis.Handlers{urnOrderCreated: ta.handler(svc, nil)}, append(opts, artemis.WithConcurrency(4))...)
		require.NoError(t, err)
		return c
	}
	a := subscribe(t, b.URL, topic, live, newCons("live-a", artemis.WithNonDurable()))
	bb := subscribe(t, b.URL, topic, live, newCons("live-b", artemis.WithNonDurable()))
	subscribe(t, b.URL, topic, audit, newCons("audit"))

	// While attached: one non-durable multicast queue on the topic, shared
	// by both instances.
	qs := queuesNamed(t, b, live)
	require.Len(t, qs, 1, "one queue for the subscription: %+v", qs)
	q := qs[0]
	assert.Equal(t, volatileQueue, q.Name)
	assert.Equal(t, topic, q.Address)
	assert.Equal(t, "MULTICAST", q.RoutingType)
	assert.Equal(t, "false", q.Durable, "not durable")
	assert.Equal(t, "2", q.ConsumerCount, "both instances share it")

	pub := topicPublisher(t, b.URL, topic)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	publish := func(n int, from int) {
		receipts := make([]*artemis.Receipt, 0, n)
		for i := range n {
			r, err := pub.PublishWithReceipt(ctx, artemis.Job(urnOrderCreated, map[string]any{"n": from + i}))
			require.NoError(t, err)
			receipts = append(receipts, r)
		}
		for _, r := range receipts {
			require.NoError(t, r.Wait(ctx))
		}
	}
	const attachedEvents, detachedEvents = 500, 100
	publish(attachedEvents, 0)
	ta.await(t, "audit", attachedEvents, arrival)
	deadline := time.After(arrival)
	for ta.count("live-a")+ta.count("live-b") < attachedEvents {
		select {
		case <-ta.ch:
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			t.Fatalf("live handled %d of %d", ta.count("live-a")+ta.count("live-b"), attachedEvents)
		}
	}

	// Detached: the queue is gone with the last consumer, and no
	// dead-letter queue was made for it (nothing was dead-lettered).
	a.stop(t)
	assert.Len(t, queuesNamed(t, b, live), 1, "one instance still holds it")
	bb.stop(t)
	gone := awaitNoQueue(t, b, live)

	// What is published meanwhile is kept for the durable subscription
	// only; a new attach starts a new, empty queue.
	publish(detachedEvents, attachedEvents)
	ta.await(t, "audit", attachedEvents+detachedEvents, arrival)
	subscribe(t, b.URL, topic, live, newCons("live-c", artemis.WithNonDurable()))
	publish(1, attachedEvents+detachedEvents)
	ta.await(t, "live-c", 1, arrival)
	time.Sleep(quiet)

	ta.mu.Lock()
	defer ta.mu.Unlock()
	union := map[string]int{}
	for _, svc := range []string{"live-a", "live-b"} {
		for id, n := range ta.seen[svc] {
			union[id] += n
		}
	}
	assert.Len(t, union, attachedEvents, "live handled every event published while it was attached")
	for id, n := range union {
		assert.Equal(t, 1, n, "live handled %s", id)
	}
	assert.Equal(t, 1, ta.n["live-c"], "the new attach got only what was published after it")
	assert.Len(t, ta.seen["audit"], attachedEvents+detachedEvents+1, "the durable subscription got everything")
	t.Logf("non-durable: %d events while attached: live %d (instances %d + %d, none twice), audit %d; queue %s (durable %s) gone at look %d after the last detach; %d published while detached: live 0, audit %d; re-attached: live %d",
		attachedEvents, len(union), ta.n["live-a"], ta.n["live-b"], attachedEvents, volatileQueue, q.Durable, gone,
		detachedEvents, detachedEvents, ta.n["live-c"])
}

func TestIntegrationTopicNonDurableSubscriptionRetriesAtOnceAndKeepsItsDeadLetters(t *testing.T) {
	b, conn, topic := onBroker(t)
	b.RequireCLI(t)
	live := topic + ".live"
	volatileQueue := live + ":shared-volatile:global"
	ta := newTally()
	var mu sync.Mutex
	tries := map[int]int{}
	failOdd := func(env *artemis.Envelope) error {
		var d struct{ N int }
		if err := json.Unmarshal(env.Data, &d); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		tries[d.N]++
		if d.N%2 == 1 {
			return errDeclined
		}
		return nil
	}
	// The default retry schedule is not taken: the retries are immediate.
	cons, err := artemis.NewConsumer(artemis.Handlers{urnOrderCreated: ta.handler("live", failOdd)}, artemis.WithMaxTries(2), artemis.WithNonDurable())
	require.NoError(t, err)
	s := subscribe(t, b.URL, topic, live, cons)

	pub := topicPublisher(t, b.URL, topic)
	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	const events = 10
	start := time.Now()
	for i := range events {
		_, err := pub.Publish(ctx, artemis.Job(urnOrderCreated, map[string]any{"n": i}))
		require.NoError(t, err)
	}
	ta.await(t, "live", events/2, arrival)
	dlq := volatileQueue + ".dlq"
	var records []*artemis.Envelope
	for range events / 2 {
		rec := receiveOn(t, conn, dlq, nil)
		env, err := artemis.Decode([]byte(valueString(t, rec)))
		require.NoError(t, err)
		require.NotNil(t, env.DeadLetter)
		assert.Equal(t, topic+"::"+volatileQueue, env.DeadLetter.OriginalQueue)
		assert.Equal(t, 1, env.DeadLetter.Attempts, "the reconciled attempts of its second try")
		records = append(records, env)
	}
	took := time.Since(start)
	assert.Less(t, took, 10*time.Second, "retried at once, not after the default schedule's 10 s")
	mu.Lock()
	for n := range events {
		want := 1
		if n%2 == 1 {
			want = 2
		}
		assert.Equal(t, want, tries[n], "event %d's attempts", n)
	}
	mu.Unlock()

	s.stop(t)
	// The subscription queue goes with its consumer; no queue was made for
	// a retry copy; only the dead-letter queue is kept.
	deadline := time.Now().Add(arrival)
	left := queuesNamed(t, b, live)
	for len(left) > 1 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		left = queuesNamed(t, b, live)
	}
	require.Len(t, left, 1, "only the dead-letter queue is kept: %+v", left)
	assert.Equal(t, dlq, left[0].Name)
	assert.Equal(t, "ANYCAST", left[0].RoutingType)
	assert.Equal(t, "true", left[0].Durable)
	assertEmpty(t, conn, dlq)
	t.Logf("non-durable retries: %d events, %d failed twice at once and dead-lettered to %s in %v; after the detach only the DLQ is left",
		events, len(records), dlq, took.Round(time.Millisecond))
}
