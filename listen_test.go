package artemis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// TestListenSurvivesAHandlerThatExitsItsGoroutine: runtime.Goexit in a
// handler (what t.FailNow does) is a failed attempt, settled once, and
// Listen goes on, with one worker or several, grouped or not.
func TestListenSurvivesAHandlerThatExitsItsGoroutine(t *testing.T) {
	for _, tc := range []struct {
		workers int
		group   string
	}{{1, ""}, {3, ""}, {3, "a"}} {
		t.Run(fmt.Sprintf("workers=%d/group=%q", tc.workers, tc.group), func(t *testing.T) {
			fr := fakelink.NewReceiver(t, "orders")
			const n = 6
			var exiting *amqp.Message
			for i := range n {
				m := groupedMessage(t, tc.group, i)
				if i == 2 {
					exiting = m
				}
				fr.Push(m)
			}
			rec := newRecorder()
			var order seqLog
			c := mustConsumer(t, Handlers{urnCreated: func(_ context.Context, _ *Envelope, m *amqp.Message) error {
				order.add(m)
				if m == exiting {
					runtime.Goexit()
				}
				return nil
			}}, WithConcurrency(tc.workers), WithOnError(rec.onError))
			done, cancel := listenInBackground(c, fr)
			waitSettled(t, fr, n)
			cancel()
			require.NoError(t, <-done)
			d, _ := fr.Disposition(exiting)
			assert.Equal(t, fakelink.Failed, d, "a failed attempt: modified with delivery-failed")
			reps := rec.all()
			require.Len(t, reps, 1)
			assert.ErrorIs(t, reps[0].err, ErrHandlerFailed)
			assert.ErrorIs(t, reps[0].err, ErrHandlerExited)
			var de *DeliveryError
			require.ErrorAs(t, reps[0].err, &de)
			assert.Equal(t, DispositionAbandoned, de.Disposition)
			for m, d := range fr.Dispositions() {
				if m != exiting {
					assert.Equal(t, fakelink.Accepted, d)
				}
			}
			if tc.group != "" || tc.workers == 1 {
				assert.Equal(t, []string{"0", "1", "2", "3", "4", "5"}, order.all(), "the group goes on in order")
			}
		})
	}
}

// TestHandlerExitAtTheLimitIsDeadLettered: the exit counts as the last
// attempt like an error does; Handle settles before its goroutine exits.
func TestHandlerExitAtTheLimitIsDeadLettered(t *testing.T) {
	dlq := &fakelink.Sender{}
	rec := newRecorder()
	c := mustConsumer(t, Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error {
		runtime.Goexit()
		return errors.New("unreachable")
	}}, WithDeadLetterSender(dlq), WithOnError(rec.onError))
	fr := fakelink.NewReceiver(t, "orders")
	msg := fr.Track(orderMessage(t, 2))
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		_ = c.Handle(context.Background(), fr, msg)
		t.Error("Handle returned: the handler's Goexit goes on exiting the goroutine")
	}()
	<-exited
	d, ok := fr.Disposition(msg)
	require.True(t, ok)
	assert.Equal(t, fakelink.Accepted, d)
	require.Len(t, dlq.Kept(), 1)
	env := dlqEnvelope(t, dlq.Kept()[0])
	assert.Equal(t, ReasonFailed, env.DeadLetter.Reason)
	require.NotNil(t, env.DeadLetter.Error)
	assert.Contains(t, *env.DeadLetter.Error, "exited its goroutine")
	require.Len(t, rec.all(), 1)
	assert.ErrorIs(t, rec.all()[0].err, ErrHandlerExited)
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

// seqLog records the seq of each message a handler saw, in call order.
type seqLog struct {
	mu   sync.Mutex
	seqs []string
}

func (l *seqLog) add(msg *amqp.Message) {
	l.mu.Lock()
	l.seqs = append(l.seqs, seqOf(msg))
	l.mu.Unlock()
}

func (l *seqLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seqs)
}

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
	r := &fakelink.Tap{Receiver: fr, OnReceive: func(m *amqp.Message) {
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
	var slowOrder seqLog
	c := mustConsumer(t, Handlers{urnCreated: func(_ context.Context, _ *Envelope, msg *amqp.Message) error {
		if groupID(msg) == "slow" {
			slowOrder.add(msg)
			slowStarted <- struct{}{}
			<-gate
		}
		return nil
	}}, WithConcurrency(2))
	done, cancel := listenInBackground(c, fr)
	waitSettled(t, fr, 20) // all but the slow group, with one worker stuck
	<-slowStarted
	assert.Equal(t, []string{"0"}, slowOrder.all(), "the slow group's later deliveries wait for its first")
	for m := range fr.Dispositions() {
		assert.NotEqual(t, "slow", groupID(m))
	}
	close(gate)
	waitSettled(t, fr, 3)
	cancel()
	require.NoError(t, <-done)
	assert.Equal(t, []string{"0", "1", "2"}, slowOrder.all())
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
	var log seqLog
	c := mustConsumer(t, Handlers{urnCreated: func(_ context.Context, _ *Envelope, msg *amqp.Message) error {
		log.add(msg)
		return nil
	}})
	done, cancel := listenInBackground(c, fr)
	waitSettled(t, fr, n)
	cancel()
	require.NoError(t, <-done)
	order := log.all()
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

// gatedHandler counts its calls, says on started that one began and
// returns only once gate is closed.
func gatedHandler(calls *atomic.Int32, started chan<- struct{}, gate <-chan struct{}) HandlerFunc {
	return func(context.Context, *Envelope, *amqp.Message) error {
		calls.Add(1)
		started <- struct{}{}
		<-gate
		return nil
	}
}

// TestListenStartsNothingAfterASettlementLosesTheLink: go-amqp keeps
// handing out prefetched deliveries after the link dropped. Once a
// settlement fails with a link error, no further handler starts; Listen
// returns that error after the handlers in flight finished, and the
// deliveries it took but did not start are given back.
func TestListenStartsNothingAfterASettlementLosesTheLink(t *testing.T) {
	for _, tc := range []struct {
		workers int
		group   func(i int) string
	}{
		{1, func(int) string { return "" }},
		{4, func(int) string { return "" }},
		{4, func(i int) string { return fmt.Sprintf("g%d", i%4) }},
	} {
		t.Run(fmt.Sprintf("workers=%d/grouped=%t", tc.workers, tc.group(1) != ""), func(t *testing.T) {
			fr := fakelink.NewReceiver(t, "orders")
			for i := range 20 { // prefetched on a credit of 20
				fr.Push(groupedMessage(t, tc.group(i), i))
			}
			var calls atomic.Int32
			started := make(chan struct{}, 20)
			gate := make(chan struct{})
			rec := newRecorder()
			c := mustConsumer(t, Handlers{urnCreated: gatedHandler(&calls, started, gate)}, WithConcurrency(tc.workers), WithOnError(rec.onError))
			done, cancel := listenInBackground(c, fr)
			defer cancel()
			for range tc.workers {
				<-started
			}
			cut := &amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondDetachForced, Description: "connection cut"}}
			fr.SetSettleErr(cut)
			close(gate)
			var err error
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("Listen did not return after the link was lost")
			}
			require.Error(t, err)
			var le *amqp.LinkError
			assert.ErrorAs(t, err, &le)
			assert.Contains(t, err.Error(), "link lost")
			assert.Equal(t, int32(tc.workers), calls.Load(), "handler calls: only those in flight at the cut")
			for _, rep := range rec.all() {
				assert.ErrorIs(t, rep.err, ErrSettlement)
			}
			// Every delivery taken was settled (fakelink checks at cleanup);
			// the rest stay with the broker.
			assert.Equal(t, 20, fr.Settled()+fr.Queued())
		})
	}
}

// endAfterHandlers checks that Listen (done) does not return within 20 ms
// while held handlers are in flight, then lets them finish (closes gate)
// and returns Listen's result.
func endAfterHandlers(t *testing.T, done <-chan error, gate chan struct{}, inFlight string) error {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("Listen returned (%v) with %s in flight", err, inFlight)
	case <-time.After(20 * time.Millisecond):
	}
	close(gate)
	return <-done
}

// TestListenGivesBackTheGroupQueuesWhenReceiveFails: deliveries waiting in
// a group's queue when Receive fails are released, never handled.
func TestListenGivesBackTheGroupQueuesWhenReceiveFails(t *testing.T) {
	fr := fakelink.NewReceiver(t, "orders")
	taken := make(chan struct{}, 3)
	r := &fakelink.Tap{Receiver: fr, OnReceive: func(*amqp.Message) { taken <- struct{}{} }}
	for i := range 3 {
		fr.Push(groupedMessage(t, "a", i))
	}
	gate := make(chan struct{})
	started := make(chan struct{}, 3)
	var calls atomic.Int32
	c := mustConsumer(t, Handlers{urnCreated: gatedHandler(&calls, started, gate)}, WithConcurrency(2))
	done, cancel := listenInBackground(c, r)
	defer cancel()
	for range 3 {
		<-taken
	}
	<-started
	fr.Fail(&amqp.LinkError{})
	err := endAfterHandlers(t, done, gate, "a handler")
	var le *amqp.LinkError
	require.ErrorAs(t, err, &le)
	assert.Contains(t, err.Error(), "receive: ")
	assert.Equal(t, int32(1), calls.Load())
	counts := map[fakelink.Disposition]int{}
	for _, d := range fr.Dispositions() {
		counts[d]++
	}
	assert.Equal(t, map[fakelink.Disposition]int{fakelink.Accepted: 1, fakelink.Released: 2}, counts)
}

// TestListenHonoursTheClientsLinkHook: when the Client says the connection
// is dead, Listen starts nothing more and returns the cause once the
// handlers in flight are done.
func TestListenHonoursTheClientsLinkHook(t *testing.T) {
	fr := fakelink.NewReceiver(t, "orders")
	for i := range 10 {
		fr.Push(groupedMessage(t, "", i))
	}
	started := make(chan struct{}, 10)
	gate := make(chan struct{})
	var calls atomic.Int32
	c := mustConsumer(t, Handlers{urnCreated: gatedHandler(&calls, started, gate)}, WithConcurrency(2))
	link, kill := context.WithCancelCause(context.Background())
	dead := errors.New("connection known dead")
	done := make(chan error, 1)
	go func() { done <- c.listen(context.Background(), fr, link) }()
	<-started
	<-started
	kill(dead)
	err := endAfterHandlers(t, done, gate, "handlers")
	assert.ErrorIs(t, err, dead)
	assert.Equal(t, int32(2), calls.Load())
	accepted := 0
	for _, d := range fr.Dispositions() {
		switch d {
		case fakelink.Accepted:
			accepted++
		case fakelink.Released:
		default:
			t.Errorf("unexpected disposition %v", d)
		}
	}
	assert.Equal(t, 2, accepted, "the handlers in flight settle")
}

// TestListenStartsNoHandlerAfterShutdown: 100 shutdowns with concurrency
// 4; a delivery that Receive returned after the cancel never reaches a
// handler, it is released.
func TestListenStartsNoHandlerAfterShutdown(t *testing.T) {
	var lateTaken, lateStarted, released int
	for round := range 100 {
		fr := fakelink.NewReceiver(t, "orders")
		for i := range 64 {
			fr.Push(groupedMessage(t, []string{"", "a", "b"}[i%3], i))
		}
		var cancelled atomic.Bool
		var mu sync.Mutex
		late := map[*amqp.Message]bool{}
		r := &fakelink.Tap{Receiver: fr, OnReceive: func(m *amqp.Message) {
			if cancelled.Load() {
				mu.Lock()
				late[m] = true
				mu.Unlock()
			}
		}}
		c := mustConsumer(t, Handlers{urnCreated: func(_ context.Context, _ *Envelope, m *amqp.Message) error {
			mu.Lock()
			if late[m] {
				lateStarted++
			}
			mu.Unlock()
			return nil
		}}, WithConcurrency(4))
		done, cancel := listenInBackground(c, r)
		waitSettled(t, fr, 8+round%16)
		cancel()
		cancelled.Store(true)
		require.NoError(t, <-done)
		mu.Lock()
		lateTaken += len(late)
		mu.Unlock()
		for m, d := range fr.Dispositions() {
			if d == fakelink.Released {
				released++
			}
			if late[m] {
				assert.Equal(t, fakelink.Released, d)
			}
		}
	}
	t.Logf("100 shutdowns: %d deliveries taken after the cancel, %d handler starts for them, %d released", lateTaken, lateStarted, released)
	assert.Zero(t, lateStarted)
}

// releaseRefused passes every release on to its receiver, then fails it.
type releaseRefused struct{ Receiver }

func (r releaseRefused) ReleaseMessage(ctx context.Context, m *amqp.Message) error {
	_ = r.Receiver.ReleaseMessage(ctx, m)
	return errors.New("release refused")
}

// TestListenWorkerExitInAGiveBackStillWaitsForTheWorkers: with several
// workers, a delivery given back by the worker that received it (here:
// taken just as ctx ends) whose release fails is reported on that worker's
// goroutine. A callback that exits the goroutine there (runtime.Goexit)
// ends the receiving, and Listen returns, but not before the handler in
// flight settled and every worker ended (synctest fails on a worker left
// blocked).
func TestListenWorkerExitInAGiveBackStillWaitsForTheWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fr := fakelink.NewReceiver(t, "orders")
		first, second := groupedMessage(t, "", 0), groupedMessage(t, "", 1)
		fr.Push(first)
		fr.Push(second)
		started := make(chan struct{}, 1)
		gate := make(chan struct{})
		var calls atomic.Int32
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := &fakelink.Tap{Receiver: fr, OnReceive: func(m *amqp.Message) {
			if m == second {
				<-started // the first is in a handler
				cancel()  // the second comes after ctx's end: given back
			}
		}}
		reported := make(chan struct{})
		c := mustConsumer(t, Handlers{urnCreated: gatedHandler(&calls, started, gate)}, WithConcurrency(2),
			WithOnError(func(_ context.Context, err error, _ *Envelope, _ *amqp.Message) {
				assert.ErrorIs(t, err, ErrSettlement)
				close(reported)
				runtime.Goexit()
			}))
		returned := make(chan error, 1)
		go func() { returned <- c.Listen(ctx, releaseRefused{r}) }()
		<-reported
		synctest.Wait()
		select {
		case err := <-returned:
			t.Fatalf("Listen returned (%v) with a handler in flight", err)
		default:
		}
		close(gate)
		require.NoError(t, <-returned)
		d, _ := fr.Disposition(first)
		assert.Equal(t, fakelink.Accepted, d, "the handler in flight settled")
		d, _ = fr.Disposition(second)
		assert.Equal(t, fakelink.Released, d)
		assert.Equal(t, int32(1), calls.Load())
	})
}

// TestListenRetryHoldEndsWhenTheLinkIsLost: a delivery held for the retry
// delay after a failed dead-letter write is let go as soon as the link is
// known to be lost (here: the Client's hook, cut while the error callback
// hears of the failed write), with one worker or several: Listen returns
// without sitting out the hold, and the failure is reported once.
func TestListenRetryHoldEndsWhenTheLinkIsLost(t *testing.T) {
	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			fr := fakelink.NewReceiver(t, "orders")
			msg := orderMessage(t, 0)
			fr.Push(msg)
			link, kill := context.WithCancelCause(context.Background())
			defer kill(nil)
			dead := errors.New("connection known dead")
			rec := newRecorder()
			dlq := &fakelink.Sender{Outcome: fakelink.Reject}
			c := mustConsumer(t, Handlers{urnCreated: failing(errors.New("boom"))},
				WithDeadLetterSender(dlq), WithQueue("orders"), WithMaxTries(1), WithConcurrency(workers),
				WithDeadLetterRetryDelay(time.Hour), WithOnError(func(ctx context.Context, err error, env *Envelope, m *amqp.Message) {
					rec.onError(ctx, err, env, m)
					kill(dead) // lost before the hold starts
				}))
			holds := make(chan time.Duration, 1)
			c.after = func(d time.Duration) <-chan time.Time {
				holds <- d
				return make(chan time.Time) // the hold never ends on the clock
			}
			done := make(chan error, 1)
			go func() { done <- c.listen(context.Background(), fr, link) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Listen sat out the retry hold after the link was lost")
			}
			assert.ErrorIs(t, err, dead)
			assert.Equal(t, time.Hour, <-holds, "the hold had started")
			d, _ := fr.Disposition(msg)
			assert.Equal(t, fakelink.Released, d, "released once the hold was cut")
			reps := rec.all()
			require.Len(t, reps, 1, "reported once")
			assert.ErrorIs(t, reps[0].err, ErrDeadLetterFailed)
		})
	}
}

// TestListenRetryHoldEndsWhenASettlementLosesTheLink: the link is lost by
// another worker's failed settlement while a delivery is held after a
// failed dead-letter write: the hold is cut, its release fails on the dead
// link and is reported as a failed settlement, and nothing is reported
// twice.
func TestListenRetryHoldEndsWhenASettlementLosesTheLink(t *testing.T) {
	fr := fakelink.NewReceiver(t, "orders")
	held, other := groupedMessage(t, "", 0), groupedMessage(t, "", 1)
	fr.Push(held)
	fr.Push(other)
	cut := &amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondDetachForced, Description: "connection cut"}}
	otherGo := make(chan struct{})
	rec := newRecorder()
	dlq := &fakelink.Sender{Outcome: fakelink.Reject}
	c := mustConsumer(t, Handlers{urnCreated: func(_ context.Context, _ *Envelope, m *amqp.Message) error {
		if m == held {
			return errors.New("boom")
		}
		<-otherGo
		return nil
	}}, WithDeadLetterSender(dlq), WithQueue("orders"), WithMaxTries(1), WithConcurrency(2),
		WithDeadLetterRetryDelay(time.Hour), WithOnError(func(ctx context.Context, err error, env *Envelope, m *amqp.Message) {
			rec.onError(ctx, err, env, m)
			if errors.Is(err, ErrDeadLetterFailed) {
				fr.SetSettleErr(cut) // the other's accept loses the link
				close(otherGo)
			}
		}))
	c.after = func(time.Duration) <-chan time.Time { return make(chan time.Time) }
	done := make(chan error, 1)
	go func() { done <- c.Listen(context.Background(), fr) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Listen sat out the retry hold after the link was lost")
	}
	var le *amqp.LinkError
	require.ErrorAs(t, err, &le)
	d, _ := fr.Disposition(held)
	assert.Equal(t, fakelink.Released, d, "the release was tried once the hold was cut")
	seen := map[string]int{}
	for _, rep := range rec.all() {
		var de *DeliveryError
		require.ErrorAs(t, rep.err, &de)
		seen[fmt.Sprintf("%s %v", seqOf(rep.msg), de.Kind)]++
	}
	assert.Equal(t, map[string]int{
		"0 " + KindDeadLetterFailed.String(): 1,
		"0 " + KindSettlement.String():       1,
		"1 " + KindSettlement.String():       1,
	}, seen)
}

// TestListenSurvivesAnErrorCallbackThatExitsItsGoroutine: a WithOnError
// callback that exits a goroutine of Listen's own while it hears of a
// failed dead-letter write (reported before the release) leaves that
// delivery settled, and Listen goes on with the others.
func TestListenSurvivesAnErrorCallbackThatExitsItsGoroutine(t *testing.T) {
	for _, workers := range []int{1, 3} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			fr := fakelink.NewReceiver(t, "orders")
			const n = 6
			var failed *amqp.Message
			for i := range n {
				m := groupedMessage(t, "", i)
				if i == 2 {
					failed = m
				}
				fr.Push(m)
			}
			var exits atomic.Int32
			dlq := &fakelink.Sender{Outcome: fakelink.Reject}
			c := mustConsumer(t, Handlers{urnCreated: func(_ context.Context, _ *Envelope, m *amqp.Message) error {
				if m == failed {
					return errors.New("boom")
				}
				return nil
			}}, WithDeadLetterSender(dlq), WithQueue("orders"), WithMaxTries(1), WithDeadLetterRetryDelay(0),
				WithConcurrency(workers), WithOnError(func(_ context.Context, err error, _ *Envelope, _ *amqp.Message) {
					assert.ErrorIs(t, err, ErrDeadLetterFailed)
					exits.Add(1)
					runtime.Goexit()
				}))
			done, cancel := listenInBackground(c, fr)
			waitSettled(t, fr, n)
			cancel()
			require.NoError(t, <-done)
			assert.Equal(t, int32(1), exits.Load())
			for m, d := range fr.Dispositions() {
				if m == failed {
					assert.Equal(t, fakelink.Released, d, "released after the failed dead-letter write")
				} else {
					assert.Equal(t, fakelink.Accepted, d)
				}
			}
		})
	}
}
