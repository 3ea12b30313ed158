package integration_test

// Message groups on a real broker: the AMQP group-id is what a JMS peer
// reads as JMSXGroupID, and Consumer.Listen with several workers handles
// each group one delivery at a time, in the order the broker sent them.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
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

// orderTap records, per group, the order in which Receive handed out the
// deliveries.
type orderTap struct {
	*amqp.Receiver
	mu       sync.Mutex
	received map[string][]*amqp.Message
}

func msgGroup(m *amqp.Message) string {
	if m.Properties == nil || m.Properties.GroupID == nil {
		return ""
	}
	return *m.Properties.GroupID
}

func (o *orderTap) Receive(ctx context.Context, opts *amqp.ReceiveOptions) (*amqp.Message, error) {
	m, err := o.Receiver.Receive(ctx, opts)
	if err == nil {
		o.mu.Lock()
		o.received[msgGroup(m)] = append(o.received[msgGroup(m)], m)
		o.mu.Unlock()
	}
	return m, err
}

// groupRuns counts the handlers running, per group and at once, and keeps
// what each group's handlers got, in order; its caller holds a lock.
type groupRuns struct {
	handled   map[string][]*amqp.Message
	running   map[string]int
	now, peak int
}

func newGroupRuns() *groupRuns {
	return &groupRuns{handled: map[string][]*amqp.Message{}, running: map[string]int{}}
}

// enter starts a handler of group g for msg; a second handler of a group
// (other than "", no group) at once fails the test.
func (r *groupRuns) enter(t *testing.T, g string, msg *amqp.Message) {
	r.handled[g] = append(r.handled[g], msg)
	r.running[g]++
	r.now++
	r.peak = max(r.peak, r.now)
	if g != "" {
		assert.Equal(t, 1, r.running[g], "two handlers of %s at once", g)
	}
}

// leave ends a handler of group g.
func (r *groupRuns) leave(g string) {
	r.running[g]--
	r.now--
}

func TestIntegrationMessageGroups(t *testing.T) {
	b, conn, q := onBroker(t)
	const groups, perGroup, ungrouped = 4, 15, 10
	var plan []string
	for g := range groups {
		for range perGroup {
			plan = append(plan, fmt.Sprintf("customer-%d", g))
		}
	}
	for range ungrouped {
		plan = append(plan, "")
	}
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	for seq, g := range plan {
		env, err := artemis.NewEnvelope("urn:babel:orders:created", json.RawMessage(fmt.Sprintf(`{"seq":%d}`, seq)), artemis.EnvelopeQueue(q))
		require.NoError(t, err)
		msg, err := artemis.NewMessage(env, artemis.WithHeaders(map[string]string{"seq": fmt.Sprint(seq)}))
		require.NoError(t, err)
		if g != "" {
			gid := g
			msg.Properties.GroupID = &gid
		}
		conn.Send(q, msg)
	}

	if b.HasCLI() {
		// A JMS client (the Artemis CLI over CORE) sees the group-id as
		// JMSXGroupID.
		ctx, cancel := context.WithTimeout(context.Background(), 2*brokertest.CLITimeout)
		msgs, err := b.Browse(ctx, q, "JMSXGroupID = 'customer-1'")
		cancel()
		require.NoError(t, err)
		assert.Len(t, msgs, perGroup, "the JMS peer selects the group by JMSXGroupID")
		t.Logf("JMS peer (artemis browser): %d messages with JMSXGroupID = 'customer-1'", len(msgs))
	} else {
		t.Log("no Artemis CLI: the JMS view of JMSXGroupID is not checked")
	}

	var mu sync.Mutex
	runs := newGroupRuns()
	handled := runs.handled
	accepted := map[string]bool{}
	all := make(chan struct{})
	rng := rand.New(rand.NewPCG(5, 6))
	cons := testkit.MustConsumer(t, artemis.Handlers{"urn:babel:orders:created": func(ctx context.Context, env *artemis.Envelope, msg *amqp.Message) error {
		g := msgGroup(msg)
		seq := artemis.HeadersFromContext(ctx).Get("seq")
		mu.Lock()
		runs.enter(t, g, msg)
		fail := env.Attempts == 0 && rng.IntN(6) == 0
		delay := time.Duration(rng.IntN(3)) * time.Millisecond
		mu.Unlock()
		time.Sleep(delay) // handler work of random length
		mu.Lock()
		runs.leave(g)
		if !fail && !accepted[seq] {
			accepted[seq] = true
			if len(accepted) == len(plan) {
				close(all)
			}
		}
		mu.Unlock()
		if fail {
			return fmt.Errorf("seq %s: first attempt fails", seq)
		}
		return nil
	}}, artemis.WithConcurrency(4), artemis.WithMaxTries(5))
	tap := &orderTap{Receiver: conn.NewReceiver(q, &brokertest.ReceiverOptions{Credit: 20}), received: map[string][]*amqp.Message{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons.Listen(ctx, tap) }()
	select {
	case <-all:
	case <-time.After(60 * time.Second):
		cancel()
		mu.Lock()
		n := len(accepted)
		mu.Unlock()
		t.Fatalf("%d of %d messages handled by the deadline", n, len(plan))
	}
	cancel()
	require.NoError(t, <-done)
	conn.CloseReceiver(tap.Receiver)

	mu.Lock()
	defer mu.Unlock()
	for g := range groups {
		id := fmt.Sprintf("customer-%d", g)
		require.Len(t, handled[id], len(tap.received[id]), id)
		for i := range handled[id] {
			assert.Same(t, tap.received[id][i], handled[id][i], "%s: handler %d is not delivery %d", id, i, i)
		}
	}
	assert.Greater(t, runs.peak, 1, "groups ran in parallel")
	t.Logf("%d messages in %d groups and ungrouped, peak %d handlers at once", len(plan), groups, runs.peak)
}
