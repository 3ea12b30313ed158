package artemis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// tapReceiver calls onReceive with every delivery Receive hands out, before
// the consumer sees it.
type tapReceiver struct {
	*fakelink.Receiver
	onReceive func(*amqp.Message)
}

func (t *tapReceiver) Receive(ctx context.Context, o *amqp.ReceiveOptions) (*amqp.Message, error) {
	m, err := t.Receiver.Receive(ctx, o)
	if err == nil && t.onReceive != nil {
		t.onReceive(m)
	}
	return m, err
}

// groupedMessage is an order delivery with group-id group ("" for none)
// and the application property seq.
func groupedMessage(t testing.TB, group string, seq int) *amqp.Message {
	m := orderMessage(t, 0)
	m.ApplicationProperties["seq"] = fmt.Sprint(seq)
	if group != "" {
		if m.Properties == nil {
			m.Properties = &amqp.MessageProperties{}
		}
		g := group
		m.Properties.GroupID = &g
	}
	return m
}

func seqOf(msg *amqp.Message) string { return fmt.Sprint(msg.ApplicationProperties["seq"]) }

// listenInBackground runs c.Listen and returns its result channel and the
// cancel of its context.
func listenInBackground(c *Consumer, r Receiver) (<-chan error, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Listen(ctx, r) }()
	return done, cancel
}

func waitSettled(t *testing.T, r *fakelink.Receiver, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, r.WaitSettled(ctx, n))
}

// TestListenGroupsKeepOrderUnderRandomLatency: deliveries of one group are
// handled one at a time, in the order they were received (redeliveries of
// failed attempts included), each only after the previous one of its group
// was settled; handlers take a random time and a fifth of the messages fail
// their first attempt.
func TestListenGroupsKeepOrderUnderRandomLatency(t *testing.T) {
	const groups, perGroup, ungrouped, workers = 8, 40, 40, 4
	rng := rand.New(rand.NewPCG(1, 2))
	fr := fakelink.NewReceiver(t, "orders")
	fr.Redeliver = true

	var plan []string // the group of each message in queue order
	for g := range groups {
		for range perGroup {
			plan = append(plan, fmt.Sprintf("g%d", g))
		}
	}
	for range ungrouped {
		plan = append(plan, "")
	}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	failures := 0
	for seq, g := range plan {
		fr.Push(groupedMessage(t, g, seq))
		if seq%5 == 0 {
			failures++
		}
	}

	var mu sync.Mutex
	received := map[string][]*amqp.Message{} // per group, in Receive order
	handled := map[string][]*amqp.Message{}  // per group, in handler-start order
	running := map[string]int{}
	last := map[string]*amqp.Message{}
	peak := 0
	total := 0
	r := &tapReceiver{Receiver: fr, onReceive: func(m *amqp.Message) {
		mu.Lock()
		received[groupID(m)] = append(received[groupID(m)], m)
		mu.Unlock()
	}}
	c := mustConsumer(t, Handlers{urnCreated: func(ctx context.Context, env *Envelope, msg *amqp.Message) error {
		g := groupID(msg)
		mu.Lock()
		handled[g] = append(handled[g], msg)
		running[g]++
		total++
		peak = max(peak, total)
		if g != "" {
			assert.Equal(t, 1, running[g], "two handlers of group %s at once", g)
			if prev := last[g]; prev != nil {
				_, settled := fr.Disposition(prev)
				assert.True(t, settled, "group %s: seq %s started before seq %s was settled", g, seqOf(msg), seqOf(prev))
			}
			last[g] = msg
		}
		mu.Unlock()
		for range rng2(msg).IntN(200) {
			runtime.Gosched()
		}
		mu.Lock()
		running[g]--
		total--
		mu.Unlock()
		var seq int
		_, _ = fmt.Sscan(seqOf(msg), &seq)
		if seq%5 == 0 && env.Attempts == 0 {
			return fmt.Errorf("first attempt of seq %d fails", seq)
		}
		return nil
	}}, WithConcurrency(workers), WithMaxTries(5))
	done, cancel := listenInBackground(c, r)
	waitSettled(t, fr, len(plan)+failures)
	cancel()
	require.NoError(t, <-done)

	mu.Lock()
	defer mu.Unlock()
	for g := range groups {
		id := fmt.Sprintf("g%d", g)
		require.Len(t, handled[id], len(received[id]), "group %s", id)
		for i := range received[id] {
			assert.Same(t, received[id][i], handled[id][i], "group %s: handler %d is not delivery %d", id, i, i)
		}
	}
	assert.Greater(t, peak, 1, "nothing ran in parallel")
	accepted := map[string]bool{}
	for m, d := range fr.Dispositions() {
		if d == fakelink.Accepted {
			accepted[seqOf(m)] = true
		}
	}
	assert.Len(t, accepted, len(plan), "every message was accepted in the end")
}

// rng2 is a per-delivery random source, so handler latency does not race
// on one generator.
func rng2(msg *amqp.Message) *rand.Rand {
	var seq uint64
	_, _ = fmt.Sscan(seqOf(msg), &seq)
	return rand.New(rand.NewPCG(seq, uint64(deliveryCount(msg))))
}

// TestListenSlowGroupDoesNotBlockOthers: while one group's handler is
// stuck, the rest of that group waits and everything else goes on.
func TestListenSlowGroupDoesNotBlockOthers(t *testing.T) {
	fr := fakelink.NewReceiver(t, "orders")
	seq := 0
	push := func(group string, n int) {
		for range n {
			fr.Push(groupedMessage(t, group, seq))
			seq++
		}
	}
	push("slow", 3)
	push("fast", 10)
	push("", 5)
	push("other", 5)
	gate := make(chan struct{})
	slowStarted := make(chan struct{}, 3)
	var mu sync.Mutex
	var slowOrder []string
	c := mustConsumer(t, Handlers{urnCreated: func(_ context.Context, _ *Envelope, msg *amqp.Message) error {
		if groupID(msg) == "slow" {
			mu.Lock()
			slowOrder = append(slowOrder, seqOf(msg))
			mu.Unlock()
			slowStarted <- struct{}{}
			<-gate
		}
		return nil
	}}, WithConcurrency(2))
	done, cancel := listenInBackground(c, fr)
	waitSettled(t, fr, 20) // all but the slow group, with one worker stuck
	<-slowStarted
	mu.Lock()
	assert.Equal(t, []string{"0"}, slowOrder, "the slow group's later deliveries wait for its first")
	mu.Unlock()
	for m := range fr.Dispositions() {
		assert.NotEqual(t, "slow", groupID(m))
	}
	close(gate)
	waitSettled(t, fr, 3)
	cancel()
	require.NoError(t, <-done)
	assert.Equal(t, []string{"0", "1", "2"}, slowOrder)
	for _, d := range fr.Dispositions() {
		assert.Equal(t, fakelink.Accepted, d)
	}
}

// TestListenGroupsAndUngroupedRunInParallel: handlers of different groups
// and of ungrouped deliveries run at the same time, up to the concurrency.
func TestListenGroupsAndUngroupedRunInParallel(t *testing.T) {
	const workers = 4
	fr := fakelink.NewReceiver(t, "orders")
	fr.Push(groupedMessage(t, "a", 0))
	fr.Push(groupedMessage(t, "b", 1))
	fr.Push(groupedMessage(t, "", 2))
	fr.Push(groupedMessage(t, "", 3))
	started := make(chan struct{}, workers)
	release := make(chan struct{})
	c := mustConsumer(t, Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error {
		started <- struct{}{}
		<-release
		return nil
	}}, WithConcurrency(workers))
	done, cancel := listenInBackground(c, fr)
	timeout := time.After(20 * time.Second)
	for i := range workers {
		select {
		case <-started:
		case <-timeout:
			t.Fatalf("only %d of %d handlers run at once", i, workers)
		}
	}
	close(release)
	waitSettled(t, fr, workers)
	cancel()
	require.NoError(t, <-done)
}

// TestListenOneWorkerKeepsQueueOrderWithGroups: with concurrency 1 the
// queue's order holds across groups and ungrouped deliveries alike.
func TestListenOneWorkerKeepsQueueOrderWithGroups(t *testing.T) {
	fr := fakelink.NewReceiver(t, "orders")
	const n = 60
	for i := range n {
		fr.Push(groupedMessage(t, []string{"a", "b", "", "c"}[i%4], i))
	}
	var mu sync.Mutex
	var order []string
	c := mustConsumer(t, Handlers{urnCreated: func(_ context.Context, _ *Envelope, msg *amqp.Message) error {
		mu.Lock()
		order = append(order, seqOf(msg))
		mu.Unlock()
		return nil
	}})
	done, cancel := listenInBackground(c, fr)
	waitSettled(t, fr, n)
	cancel()
	require.NoError(t, <-done)
	require.Len(t, order, n)
	for i, s := range order {
		assert.Equal(t, fmt.Sprint(i), s)
	}
}

// TestListenForgetsIdleGroups: a stream of ever new group-ids keeps the
// group map bounded (idle groups past maxIdleGroups are swept).
func TestListenForgetsIdleGroups(t *testing.T) {
	l := &listener{c: mustConsumer(t, Handlers{urnCreated: succeeding}, WithConcurrency(4)), groups: map[string]*group{}}
	for i := range 5 * maxIdleGroups {
		m := groupedMessage(t, fmt.Sprintf("customer-%d", i), i)
		g := l.join(groupID(m), m)
		require.NotNil(t, g, "a new group opens")
		again := groupedMessage(t, groupID(m), i)
		require.Nil(t, l.join(groupID(again), again), "a busy group queues")
		require.Same(t, again, l.next(g))
		require.Nil(t, l.next(g))
		require.LessOrEqual(t, len(l.groups), maxIdleGroups+1)
	}
	assert.LessOrEqual(t, len(l.spare), 8)
	// An idle group that comes back opens again, with an empty queue.
	m := groupedMessage(t, "customer-1", 0)
	g := l.join("customer-1", m)
	require.NotNil(t, g)
	assert.Nil(t, l.next(g))
}

// TestListenManyGroups: more distinct groups than stay in the map, all
// handled, each once.
func TestListenManyGroups(t *testing.T) {
	fr := fakelink.NewReceiver(t, "orders")
	const n = 3 * maxIdleGroups
	for i := range n {
		fr.Push(groupedMessage(t, fmt.Sprintf("c%d", i%(n/2)), i))
	}
	c := mustConsumer(t, Handlers{urnCreated: succeeding}, WithConcurrency(4))
	done, cancel := listenInBackground(c, fr)
	waitSettled(t, fr, n)
	cancel()
	require.NoError(t, <-done)
	for _, d := range fr.Dispositions() {
		assert.Equal(t, fakelink.Accepted, d)
	}
}
