package artemis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

func TestAttemptMemoryRemembersTheMostAndForgets(t *testing.T) {
	var none *attemptMemory
	assert.Equal(t, 2, none.reconcile("q", "a", 2), "a nil memory remembers nothing")

	m := newAttemptMemory(3)
	assert.Equal(t, 0, m.reconcile("q", "a", 0))
	m.failed("q", "a", 1)
	m.failed("q", "a", 3)
	m.failed("q", "a", 2)
	assert.Equal(t, 3, m.reconcile("q", "a", 0), "the most failures seen")
	assert.Equal(t, 5, m.reconcile("q", "a", 5), "the broker's count when it is higher")
	assert.Equal(t, 0, m.reconcile("q", "", 0), "no id, no memory")
	m.forget("q", "a")
	assert.Equal(t, 0, m.reconcile("q", "a", 0))
	m.forget("q", "never-seen")
}

func TestAttemptMemoryForgetsTheOldestPastItsCap(t *testing.T) {
	m := newAttemptMemory(3)
	for i := range 5 {
		m.failed("q", fmt.Sprintf("id-%d", i), 1)
	}
	assert.Len(t, m.seen, 3)
	assert.Equal(t, 0, m.reconcile("q", "id-0", 0))
	assert.Equal(t, 0, m.reconcile("q", "id-1", 0))
	assert.Equal(t, 1, m.reconcile("q", "id-4", 0))
	for i := range 20 { // forgotten ids do not pile up
		id := fmt.Sprintf("x-%d", i)
		m.failed("q", id, 1)
		m.forget("q", id)
	}
	assert.LessOrEqual(t, len(m.order), 2*m.cap+1)
}

// An id forgotten and remembered again is as new: past the cap, the
// memory forgets the one remembered longest ago, not the re-remembered id
// through its first, stale place in the order.
func TestAttemptMemoryEvictsTheOldestLiveEntry(t *testing.T) {
	m := newAttemptMemory(2)
	m.failed("q", "a", 1)
	m.failed("q", "b", 1)
	m.forget("q", "a")
	m.failed("q", "a", 1) // a again, after b
	m.failed("q", "c", 1) // past the cap: b is the oldest
	assert.Equal(t, 0, m.reconcile("q", "b", 0), "the oldest, b, is forgotten")
	assert.Equal(t, 1, m.reconcile("q", "a", 0), "a, remembered after b, is kept")
	assert.Equal(t, 1, m.reconcile("q", "c", 0))
}

// A message that fails on one member and then shows up on another with a
// delivery-count of 0 (as redistribution delivers it) keeps its attempts:
// it reaches the dead-letter queue after maxTries calls in all.
func TestClusterConsumeCarriesAttemptsAcrossMembers(t *testing.T) {
	attached := make(chan *fakelink.Receiver, 8)
	h := newClusterHarness(t, 2, nil, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) { c.attached = attached }
	})
	require.NoError(t, h.cl.dialMembers(context.Background()))
	var mu sync.Mutex
	var seen []int
	calls := make(chan struct{}, 8)
	cons := mustConsumer(t, Handlers{urnCreated: func(_ context.Context, env *Envelope, _ *amqp.Message) error {
		mu.Lock()
		seen = append(seen, env.Attempts)
		mu.Unlock()
		calls <- struct{}{}
		return errors.New("always fails")
	}}, WithMaxTries(3), WithRetrySchedule(nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.c.Consume(ctx, "orders", cons) }()
	attachedReceiver(t, attached)
	attachedReceiver(t, attached)

	src := orderMessage(t, 0)
	moved := func() *amqp.Message { // a copy as redistribution delivers it
		m := *src
		hd := *src.Header
		hd.DeliveryCount = 0
		m.Header = &hd
		return &m
	}
	wait := func() {
		select {
		case <-calls:
		case <-time.After(5 * time.Second):
			t.Fatal("the handler was not called")
		}
	}
	for i, member := range []int{0, 1, 0} {
		r := h.connOf(member).receiverList()[0]
		msg := moved()
		r.Push(msg)
		wait()
		require.NoError(t, r.WaitSettled(context.Background(), 1), "delivery %d", i+1)
		d, _ := r.Disposition(msg)
		if i < 2 {
			assert.Equal(t, fakelink.Failed, d, "delivery %d: retried", i+1)
		} else {
			assert.Equal(t, fakelink.Accepted, d, "the last: accepted once its dead-letter copy was")
		}
	}
	mu.Lock()
	assert.Equal(t, []int{0, 1, 2}, seen, "the attempts went on across the members")
	mu.Unlock()
	dl := h.connOf(0).sendersTo("orders.dlq")
	require.Len(t, dl, 1)
	require.Len(t, dl[0].Kept(), 1, "dead-lettered on the member that saw the last attempt")

	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Consume did not return")
	}
}

// TestAttemptMemoryIsPerQueue: a topic's publish reaches two subscription
// queues with one meta.id; a Consumer on both remembers each queue's
// failed attempts apart, so a failure on one does not count on the other.
func TestAttemptMemoryIsPerQueue(t *testing.T) {
	var seen []int
	c := mustConsumer(t, Handlers{urnCreated: func(_ context.Context, env *Envelope, _ *amqp.Message) error {
		seen = append(seen, env.Attempts)
		return errors.New("boom")
	}}, WithRetrySchedule(nil), WithOnError(func(context.Context, error, *Envelope, *amqp.Message) {}))
	env, err := NewEnvelope(urnCreated, json.RawMessage(`{"order_id":1}`), EnvelopeTraceID(testTrace))
	require.NoError(t, err)
	for _, queue := range []string{"orders.events::billing", "orders.events::audit"} {
		msg, err := NewMessage(env) // the same meta.id on both queues
		require.NoError(t, err)
		r := fakelink.NewReceiver(t, queue)
		r.Track(msg)
		_ = c.Handle(context.Background(), r, msg)
		d, _ := r.Disposition(msg)
		assert.Equal(t, fakelink.Failed, d, queue)
	}
	assert.Equal(t, []int{0, 0}, seen, "each queue's first attempt is its attempt 0")
}
