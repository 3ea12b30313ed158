package integration_test

// A subscription's scheduled retry copy goes to that subscription queue
// alone (address::queue), never to the topic: the other subscriptions do
// not see the event again.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
)

func TestIntegrationTopicScheduledRetryReachesOnlyItsSubscription(t *testing.T) {
	b := brokertest.Require(t)
	topic := brokertest.Queue(t)
	const wait = time.Second
	const events = 20
	var mu sync.Mutex
	attempts := map[string][]int{} // subscription -> the attempts of each call
	calls := map[string]map[string]int{}
	got := make(chan struct{}, 1)
	handler := func(svc string, failFirst bool) artemis.HandlerFunc {
		return func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
			mu.Lock()
			attempts[svc] = append(attempts[svc], env.Attempts)
			if calls[svc] == nil {
				calls[svc] = map[string]int{}
			}
			calls[svc][env.Meta.ID]++
			mu.Unlock()
			select {
			case got <- struct{}{}:
			default:
			}
			if failFirst && env.Attempts == 0 {
				return errDeclined
			}
			return nil
		}
	}
	count := func(svc string) int {
		mu.Lock()
		defer mu.Unlock()
		return len(attempts[svc])
	}
	// billing fails each event's first attempt and retries it by a copy
	// scheduled wait later; shipping and analytics handle each at once.
	billing, err := artemis.NewConsumer(artemis.Handlers{urnOrderCreated: handler("billing", true)},
		artemis.WithRetrySchedule(func(int) time.Duration { return wait }), artemis.WithMaxTries(3))
	require.NoError(t, err)
	subscribe(t, b.URL, topic, topic+".billing", billing)
	for _, svc := range []string{"shipping", "analytics"} {
		// The same schedule: a copy wrongly sent to the topic would be
		// handled here again.
		c, err := artemis.NewConsumer(artemis.Handlers{urnOrderCreated: handler(svc, false)},
			artemis.WithRetrySchedule(func(int) time.Duration { return wait }))
		require.NoError(t, err)
		subscribe(t, b.URL, topic, topic+"."+svc, c)
	}

	pub := topicPublisher(t, b.URL, topic)
	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	start := time.Now()
	for i := range events {
		_, err := pub.Publish(ctx, artemis.Job(urnOrderCreated, map[string]any{"n": i}))
		require.NoError(t, err)
	}
	deadline := time.After(arrival)
	for count("billing") < 2*events || count("shipping") < events || count("analytics") < events {
		select {
		case <-got:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatalf("calls: billing %d of %d, shipping %d, analytics %d of %d", count("billing"), 2*events, count("shipping"), count("analytics"), events)
		}
	}
	took := time.Since(start)
	time.Sleep(2 * wait) // a copy that went astray would be delivered by now

	mu.Lock()
	defer mu.Unlock()
	retries := 0
	for _, a := range attempts["billing"] {
		if a == 1 {
			retries++
		}
	}
	assert.Len(t, attempts["billing"], 2*events, "billing: each event, then its retry copy")
	assert.Equal(t, events, retries, "billing's second calls are the copies (attempts 1)")
	assert.GreaterOrEqual(t, took, wait, "the copies waited for their schedule")
	copies := map[string]int{}
	for _, svc := range []string{"shipping", "analytics"} {
		for _, a := range attempts[svc] {
			if a > 0 {
				copies[svc]++
			}
		}
		assert.Len(t, calls[svc], events, svc)
		for id, n := range calls[svc] {
			assert.Equal(t, 1, n, "%s handled %s", svc, id)
		}
		for _, a := range attempts[svc] {
			assert.Zero(t, a, "%s never saw a retry copy", svc)
		}
	}
	t.Logf("scheduled retry on a topic: %d events; billing %d calls (%d retry copies after %v), shipping %d calls (%d copies), analytics %d calls (%d copies); all handled in %v",
		events, len(attempts["billing"]), retries, wait, len(attempts["shipping"]), copies["shipping"], len(attempts["analytics"]), copies["analytics"], took.Round(time.Millisecond))
}
