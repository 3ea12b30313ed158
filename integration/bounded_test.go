package integration_test

// A bounded Consume (WithMaxMessages, WithStopWhenIdle) for a
// job-style worker: it handles a batch and returns; every delivery is
// settled once, and the ones it did not take stay on the queue, their
// delivery count untouched.

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
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
)

const boundedURN = "urn:babel:jobs:run"

// boundedSetup dials a Client to the broker and publishes n messages to a
// fresh queue; it returns their meta.ids.
func boundedSetup(t *testing.T, n int) (context.Context, *artemis.Client, *brokertest.Conn, string, map[string]bool) {
	t.Helper()
	b, conn, q := onBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*arrival)
	t.Cleanup(cancel)
	c, err := artemis.Dial(ctx, []string{b.URL}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	pub, err := c.Publisher(ctx, q)
	require.NoError(t, err)
	ids := map[string]bool{}
	for i := range n {
		id, err := pub.Publish(ctx, artemis.Job(boundedURN, map[string]int{"n": i}))
		require.NoError(t, err)
		ids[id] = true
	}
	return ctx, c, conn, q, ids
}

// handledLog records the meta.ids a handler saw.
type handledLog struct {
	mu  sync.Mutex
	ids []string
}

func (h *handledLog) handler(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
	h.mu.Lock()
	h.ids = append(h.ids, env.Meta.ID)
	h.mu.Unlock()
	return nil
}

func (h *handledLog) list() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.ids...)
}

func TestIntegrationConsumeMaxMessages(t *testing.T) {
	for _, concurrency := range []int{1, 3} {
		t.Run(map[int]string{1: "serial", 3: "concurrent"}[concurrency], func(t *testing.T) {
			const published, batch = 12, 5
			ctx, c, conn, q, ids := boundedSetup(t, published)
			var log handledLog
			cons := testkit.MustConsumer(t, artemis.Handlers{boundedURN: log.handler}, artemis.WithConcurrency(concurrency), artemis.WithMaxMessages(batch), artemis.WithCredit(20))
			start := time.Now()
			// A credit above the batch: Consume takes it down to the batch,
			// and go-amqp's top-ups still push deliveries ahead.
			err := c.Consume(ctx, q, cons)
			require.NoError(t, err)
			require.NoError(t, ctx.Err(), "Consume returned on its own, not on the test's deadline")
			t.Logf("Consume returned after %v", time.Since(start))

			handled := log.list()
			seen := map[string]bool{}
			for _, id := range handled {
				assert.True(t, ids[id], "an id not published: %s", id)
				assert.False(t, seen[id], "handled twice: %s", id)
				seen[id] = true
			}
			require.Len(t, handled, batch)

			left := conn.Drain(q, "")
			assert.Len(t, left, published-batch, "the rest stay on the queue")
			for _, m := range left {
				env, err := artemis.Decode([]byte(valueString(t, m)))
				require.NoError(t, err)
				assert.False(t, seen[env.Meta.ID], "handled and still on the queue: %s", env.Meta.ID)
				if m.Header != nil {
					assert.Zero(t, m.Header.DeliveryCount, "a delivery it did not take was counted: %s", env.Meta.ID)
				}
			}
			assertEmpty(t, conn, q+".dlq")
		})
	}
}

func TestIntegrationConsumeStopWhenIdle(t *testing.T) {
	const published = 7
	ctx, c, conn, q, ids := boundedSetup(t, published)
	var log handledLog
	const idle = 500 * time.Millisecond
	cons := testkit.MustConsumer(t, artemis.Handlers{boundedURN: log.handler}, artemis.WithConcurrency(2), artemis.WithStopWhenIdle(idle))
	start := time.Now()
	require.NoError(t, c.Consume(ctx, q, cons))
	took := time.Since(start)
	require.NoError(t, ctx.Err(), "Consume returned on its own")
	assert.GreaterOrEqual(t, took, idle, "it waited for the queue to stay quiet")
	handled := log.list()
	assert.Len(t, handled, published)
	for _, id := range handled {
		assert.True(t, ids[id])
	}
	assertEmpty(t, conn, q)

	// An empty queue: it returns after the idle time, having handled
	// nothing; MaxMessages with it, whichever comes first.
	start = time.Now()
	cons = testkit.MustConsumer(t, artemis.Handlers{boundedURN: log.handler}, artemis.WithConcurrency(2), artemis.WithStopWhenIdle(idle), artemis.WithMaxMessages(100))
	require.NoError(t, c.Consume(ctx, q, cons))
	require.NoError(t, ctx.Err())
	assert.Len(t, log.list(), published)
	t.Logf("on an empty queue Consume returned after %v", time.Since(start))
}

func TestIntegrationConsumeBoundInvalid(t *testing.T) {
	boundedSetup(t, 0)
	h := artemis.Handlers{boundedURN: (&handledLog{}).handler}
	_, err := artemis.NewConsumer(h, artemis.WithMaxMessages(-1))
	assert.ErrorIs(t, err, artemis.ErrInvalidConfig)
	_, err = artemis.NewConsumer(h, artemis.WithStopWhenIdle(-time.Second))
	assert.ErrorIs(t, err, artemis.ErrInvalidConfig)
}
