package integration_test

// Shutdown with messages in flight: nothing is lost.

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

// TestIntegrationShutdownLosesNothing cancels Listen while four slow
// handlers are in flight (WithConcurrency(4)) and a fifth delivery waits
// for a worker. Afterwards every published message was either handled
// (accepted) or is still on the queue.
func TestIntegrationShutdownLosesNothing(t *testing.T) {
	b, conn, q, pub := onBrokerPublisher(t)
	const urn = "urn:babel:orders:created"
	const published = 20
	const concurrency = 4

	ids := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	for i := range published {
		id, err := pub.Publish(ctx, artemis.Job(urn, map[string]int{"n": i}))
		require.NoError(t, err)
		ids[id] = true
	}

	started := make(chan string, published)
	release := make(chan struct{})
	var mu sync.Mutex
	handled := map[string]bool{}
	errs := newErrorLog()
	cons := testkit.MustConsumer(t, artemis.Handlers{urn: func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		started <- env.Meta.ID
		<-release // a slow handler: it finishes when the test lets it
		mu.Lock()
		handled[env.Meta.ID] = true
		mu.Unlock()
		return nil
	}}, artemis.WithConcurrency(concurrency), artemis.WithOnError(errs.onError))
	// One credit more than the workers: Listen holds a fifth delivery it
	// cannot start, and must give it back.
	l := listen(t, conn, q, cons, concurrency+1)

	for range concurrency {
		select {
		case <-started:
		case <-time.After(arrival):
			t.Fatalf("%d handlers did not start within %v", concurrency, arrival)
		}
	}
	l.cancel()
	select {
	case err := <-l.done:
		l.done <- err
		t.Fatalf("Listen returned (%v) while handlers were still in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	l.stop()
	assert.Empty(t, started, "no handler started after the cancel")

	mu.Lock()
	defer mu.Unlock()
	assert.Len(t, handled, concurrency, "the handlers in flight finished and were accepted")

	sctx, scancel := context.WithTimeout(context.Background(), 2*brokertest.CLITimeout)
	defer scancel()
	if b.HasCLI() {
		stat, err := b.Stat(sctx, q)
		require.NoError(t, err)
		assert.Equal(t, published-concurrency, stat.MessageCount, "artemis queue stat: messages left")
		assert.Equal(t, 0, stat.DeliveringCount, "nothing held by a consumer")
		assert.Equal(t, concurrency, stat.MessagesAcked, "acknowledged: the handled ones")
	}

	remaining := map[string]bool{}
	for _, m := range conn.Drain(q, "") {
		id, _ := m.Properties.MessageID.(string)
		assert.False(t, handled[id], "message %s was handled and is still on the queue", id)
		assert.False(t, remaining[id], "message %s is on the queue twice", id)
		remaining[id] = true
	}
	assert.Equal(t, published, len(handled)+len(remaining), "handled + remaining == published")
	for id := range ids {
		assert.True(t, handled[id] || remaining[id], "message %s was lost", id)
	}
	errs.none(t)
}
