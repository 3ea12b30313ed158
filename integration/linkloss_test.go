package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
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

// TestIntegrationNoReplayOfPrefetchedDeliveriesAfterTheConnectionDies: a
// receiver with credit 10 holds prefetched deliveries when its connection
// goes; Listen handles none of them (go-amqp would still hand them out),
// returns the connection's error, and the broker sends them again to the
// next consumer. Handler calls in all: the messages, plus at most the one
// that was in a handler at the cut.
func TestIntegrationNoReplayOfPrefetchedDeliveriesAfterTheConnectionDies(t *testing.T) {
	b, pubConn, q := onBroker(t)
	const n = 20
	for i := range n {
		env, err := artemis.NewEnvelope("urn:babel:orders:created", json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), artemis.EnvelopeQueue(q))
		require.NoError(t, err)
		msg, err := artemis.NewMessage(env)
		require.NoError(t, err)
		pubConn.Send(q, msg)
	}

	var mu sync.Mutex
	calls := map[string]int{}
	total := 0
	all := make(chan struct{})
	started := make(chan struct{}, 1)
	gate := make(chan struct{})
	first := true
	cons := testkit.MustConsumer(t, artemis.Handlers{"urn:babel:orders:created": func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		mu.Lock()
		calls[env.Meta.ID]++
		total++
		if len(calls) == n {
			select {
			case <-all:
			default:
				close(all)
			}
		}
		block := first
		first = false
		mu.Unlock()
		if block {
			started <- struct{}{}
			<-gate
		}
		return nil
	}})

	cut := b.Dial(t)
	r := cut.NewReceiver(q, &brokertest.ReceiverOptions{Credit: 10})
	done := make(chan error, 1)
	go func() { done <- cons.Listen(context.Background(), r) }()
	<-started
	require.NoError(t, cut.Conn.Close())
	close(gate)
	select {
	case err := <-done:
		require.Error(t, err, "Listen returns the link's failure")
		t.Logf("Listen returned: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Listen did not return after its connection closed")
	}
	mu.Lock()
	assert.Equal(t, 1, total, "no handler started after the connection died")
	mu.Unlock()

	// The next consumer gets everything, the first delivery again too.
	next := b.Dial(t)
	ctx, cancel := context.WithCancel(context.Background())
	done2 := make(chan error, 1)
	r2 := next.NewReceiver(q, &brokertest.ReceiverOptions{Credit: 10})
	go func() { done2 <- cons.Listen(ctx, r2) }()
	select {
	case <-all:
	case <-time.After(60 * time.Second):
		mu.Lock()
		t.Errorf("%d of %d messages handled by the deadline", len(calls), n)
		mu.Unlock()
	}
	cancel()
	require.NoError(t, <-done2)
	next.CloseReceiver(r2)
	mu.Lock()
	defer mu.Unlock()
	assert.Len(t, calls, n)
	assert.LessOrEqual(t, total, n+1, "handler calls: the messages plus the one in a handler at the cut")
	t.Logf("%d messages, %d handler calls", len(calls), total)
}
