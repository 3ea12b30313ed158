package integration_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const urnOrder = "urn:babel:orders:created"

// onBrokerClient is onBroker with a Client dialled to the broker, closed
// at the end of the test.
func onBrokerClient(t *testing.T) (*brokertest.Broker, *brokertest.Conn, string, *artemis.Client) {
	t.Helper()
	b, conn, q := onBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	c, err := artemis.Dial(ctx, []string{b.URL}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return b, conn, q, c
}

// timedCall is one handler call with its time.
type timedCall struct {
	call
	at time.Time
}

// callLog records every handler call.
type callLog struct {
	mu    sync.Mutex
	calls []timedCall
}

func (l *callLog) add(env *artemis.Envelope, msg *amqp.Message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, timedCall{call{env.Attempts, msg.Header.DeliveryCount}, time.Now()})
}

func (l *callLog) all() []timedCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]timedCall(nil), l.calls...)
}

// orderData is an order with pad bytes of padding: over the broker's
// large-message size (amqpMinLargeMessageSize, 100 KiB in the project's
// broker) when pad is 200 KiB.
func orderData(pad int) map[string]any {
	return map[string]any{"order_id": 1042, "pad": strings.Repeat("x", pad)}
}

// shortSchedule waits 300ms, then 600ms: exact (no jitter), so the waits
// can be checked.
var shortSchedule = artemis.Backoff{Initial: 300 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2}

// A message that fails for ever gets exactly maxTries handler calls, its
// attempts counting up 0, 1, 2 with the scheduled waits between them, and
// then one record on <queue>.dlq; a large message (which Artemis 2.40
// redelivers with delivery-count 0 every time) alike, on the Client's
// Consume and on Listen.
func TestIntegrationRetryAFailingMessageGetsMaxTriesThenTheDLQ(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pad       int
		listen    bool
		immediate bool // WithRetrySchedule(nil): modified, the broker redelivers at once
	}{
		{"1KB consume", 1024, false, false},
		{"200KB consume", 200 * 1024, false, false},
		{"200KB listen", 200 * 1024, true, false},
		{"200KB listen immediate", 200 * 1024, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, conn, q, c := onBrokerClient(t)
			var log callLog
			fail := func(_ context.Context, env *artemis.Envelope, msg *amqp.Message) error {
				log.add(env, msg)
				return &gatewayError{}
			}
			opts := []artemis.ConsumerOption{artemis.WithRetryBackoff(shortSchedule), artemis.WithLogger(quietLogger())}
			if tc.immediate {
				opts = append(opts, artemis.WithRetrySchedule(nil))
			}
			if tc.listen {
				opts = append(opts, artemis.WithRetrySender(conn.NewSender(q)), artemis.WithDeadLetterSender(conn.NewSender(q+".dlq")))
				listen(t, conn, q, testkit.MustConsumer(t, artemis.Handlers{urnOrder: fail}, opts...), 10)
			} else {
				testkit.ConsumeInBackground(t, c, q, testkit.MustConsumer(t, artemis.Handlers{urnOrder: fail}, opts...), arrival)
			}
			ctx, cancel := context.WithTimeout(context.Background(), arrival)
			defer cancel()
			pub, err := c.Publisher(ctx, q)
			require.NoError(t, err)
			id, err := pub.Publish(ctx, artemis.Job(urnOrder, orderData(tc.pad)))
			require.NoError(t, err)

			dl := receiveOn(t, conn, q+".dlq", nil)
			env, err := artemis.Decode([]byte(valueString(t, dl)))
			require.NoError(t, err)
			time.Sleep(quiet) // nothing may come after the dead-lettering
			calls := log.all()
			var attempts, counts []int
			for _, c := range calls {
				attempts = append(attempts, c.attempts)
				counts = append(counts, int(c.deliveryCount))
			}
			var waits []time.Duration
			for i := 1; i < len(calls); i++ {
				waits = append(waits, calls[i].at.Sub(calls[i-1].at).Round(time.Millisecond))
			}
			t.Logf("retry: %s: %d handler calls (maxTries 3), attempts %v, delivery-counts %v, waits %v; on %s.dlq: attempts %d, reason %s",
				tc.name, len(calls), attempts, counts, waits, q, env.DeadLetter.Attempts, env.DeadLetter.Reason)
			assert.Equal(t, []int{0, 1, 2}, attempts, "exactly maxTries calls, counting up")
			require.Len(t, waits, 2)
			if tc.immediate {
				assert.Less(t, waits[1], time.Second, "redelivered at once")
			} else {
				// The copies are due 300ms and 600ms after the failures
				// (the broker's and this machine's clocks are one).
				assert.GreaterOrEqual(t, waits[0], 250*time.Millisecond)
				assert.GreaterOrEqual(t, waits[1], 550*time.Millisecond)
			}
			assert.Equal(t, id, env.Meta.ID)
			assert.Equal(t, 2, env.Attempts)
			require.NotNil(t, env.DeadLetter)
			assert.Equal(t, "failed", env.DeadLetter.Reason)
			assert.Equal(t, 2, env.DeadLetter.Attempts)
			assert.Equal(t, "*integration_test.gatewayError", *env.DeadLetter.Exception)
			if b.HasCLI() {
				st := queueStat(t, b, q)
				assert.Zero(t, st.MessageCount+st.ScheduledCount, "nothing left on the queue, nothing scheduled")
			}
			assertEmpty(t, conn, q+".dlq")
		})
	}
}

// With the default schedule and maxTries, a dependency down for 20s costs
// no message: every message fails while it is down, waits on the broker
// (no worker held: a message published meanwhile is handled at once), and
// is handled once after it is back.
func TestIntegrationRetryTheDefaultsRideOutA20sOutage(t *testing.T) {
	const n, outage = 100, 20 * time.Second
	b, conn, q, c := onBrokerClient(t)
	start := time.Now()
	up := start.Add(outage)
	var mu sync.Mutex
	calls, failed, handled := 0, 0, map[string]int{}
	probe := make(chan time.Time, 1)
	cons := testkit.MustConsumer(t, artemis.Handlers{
		urnOrder: func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if time.Now().Before(up) {
				failed++
				return errors.New("database unavailable")
			}
			handled[env.Meta.ID]++
			return nil
		},
		"urn:babel:probe:ping": func(context.Context, *artemis.Envelope, *amqp.Message) error {
			probe <- time.Now()
			return nil
		},
	}, artemis.WithLogger(quietLogger())) // the defaults: concurrency 1, maxTries 3, DefaultRetryBackoff
	testkit.ConsumeInBackground(t, c, q, cons, arrival)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pub, err := c.Publisher(ctx, q)
	require.NoError(t, err)
	ids := map[string]bool{}
	for i := range n {
		id, err := pub.Publish(ctx, artemis.Job(urnOrder, map[string]any{"order_id": i}))
		require.NoError(t, err)
		ids[id] = true
	}
	// Every first attempt fails and goes to the broker to wait: the one
	// worker is free again long before the first retry is due (8s).
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return failed >= n }, 8*time.Second, 20*time.Millisecond,
		"the first attempts did not all fail within 8s: a worker is held")
	sent := time.Now()
	_, err = pub.Publish(ctx, artemis.Job("urn:babel:probe:ping", map[string]any{}))
	require.NoError(t, err)
	var probeWait time.Duration
	select {
	case at := <-probe:
		probeWait = at.Sub(sent)
	case <-time.After(2 * time.Second):
		t.Fatal("a message published while 100 wait for their retry was not handled within 2s")
	}
	scheduled := -1
	if b.HasCLI() {
		scheduled = queueStat(t, b, q).ScheduledCount
	}
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(handled) == n }, 2*time.Minute, 100*time.Millisecond)
	drained := time.Since(up)
	time.Sleep(quiet)
	dead := conn.Drain(q+".dlq", "")
	mu.Lock()
	defer mu.Unlock()
	twice := 0
	for id, k := range handled {
		assert.True(t, ids[id], "handled an id never published")
		if k > 1 {
			twice++
		}
	}
	t.Logf("retry: 20s outage, defaults, %d messages: dead-lettered %d, lost %d, handled twice %d, handler calls %d (failed %d), "+
		"scheduled on the broker after the first failures %d, a new message handled %v after its publish during the wait, drained %.1fs after recovery",
		n, len(dead), n-len(handled), twice, calls, failed, scheduled, probeWait.Round(time.Millisecond), drained.Seconds())
	assert.Empty(t, dead, "nothing dead-lettered")
	assert.Len(t, handled, n, "nothing lost")
	assert.Zero(t, twice, "each handled once after the recovery")
	if scheduled >= 0 {
		assert.Equal(t, n, scheduled, "the messages wait on the broker, scheduled")
	}
}

// queueStat is the broker's counters for q through the Artemis CLI (a JVM
// start: a context of its own, long enough on a loaded machine).
func queueStat(t *testing.T, b *brokertest.Broker, q string) brokertest.QueueStat {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*brokertest.CLITimeout)
	defer cancel()
	st, err := b.Stat(ctx, q)
	require.NoError(t, err)
	return st
}

// quietLogger drops the retry warnings the tests cause on purpose.
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// A message published with duplicate detection, dead-lettered after its
// retries, then redriven (same meta.id and created_at, attempts 0, the
// dead_letter block removed: what every SDK's redrive does) and failing
// again goes through the whole schedule again: no scheduled copy is
// dropped by Artemis's duplicate detection as a copy of the original
// publish or of an earlier retry, and it reaches <queue>.dlq a second time.
func TestIntegrationRetryARedrivenMessageGoesThroughTheScheduleAgain(t *testing.T) {
	_, conn, q, c := onBrokerClient(t)
	var log callLog
	cons := testkit.MustConsumer(t, artemis.Handlers{urnOrder: func(_ context.Context, env *artemis.Envelope, msg *amqp.Message) error {
		log.add(env, msg)
		return &gatewayError{}
	}}, artemis.WithRetryBackoff(shortSchedule), artemis.WithLogger(quietLogger()))
	testkit.ConsumeInBackground(t, c, q, cons, arrival)
	ctx, cancel := context.WithTimeout(context.Background(), 2*arrival)
	defer cancel()
	pub, err := c.Publisher(ctx, q, artemis.WithDuplicateDetection())
	require.NoError(t, err)
	id, err := pub.Publish(ctx, artemis.Job(urnOrder, orderData(16)))
	require.NoError(t, err)

	first := receiveOn(t, conn, q+".dlq", nil)
	rec, err := artemis.Decode([]byte(valueString(t, first)))
	require.NoError(t, err)
	require.Equal(t, id, rec.Meta.ID)
	firstAttempts := rec.DeadLetter.Attempts
	rec.DeadLetter, rec.Attempts = nil, 0
	redrive := artemis.NewPublisher(conn.NewSender(q), q)
	_, err = redrive.Publish(ctx, rec)
	require.NoError(t, err)
	second := receiveOn(t, conn, q+".dlq", nil)
	again, err := artemis.Decode([]byte(valueString(t, second)))
	require.NoError(t, err)
	time.Sleep(quiet)
	var attempts []int
	for _, c := range log.all() {
		attempts = append(attempts, c.attempts)
	}
	t.Logf("retry: published with duplicate detection, dead-lettered, redriven, failing again: attempts %v; two records on %s.dlq (attempts %d, %d), same meta.id %t",
		attempts, q, firstAttempts, again.DeadLetter.Attempts, again.Meta.ID == id)
	assert.Equal(t, []int{0, 1, 2, 0, 1, 2}, attempts, "the whole schedule, twice")
	assert.Equal(t, id, again.Meta.ID)
	assert.Equal(t, 2, again.DeadLetter.Attempts)
	assertEmpty(t, conn, q+".dlq")
}

// A retry copy the broker refuses every time (here a full queue:
// bqtest.tinydlq.# holds one message under address-full-policy FAIL, and
// the failing message itself fills it) must not run the handler for ever:
// each refused copy is reported, the failed attempt still counts, and the
// message reaches <queue>.dlq after maxTries handler calls.
func TestIntegrationRetryACopyTheBrokerRefusesStillEndsOnTheDLQ(t *testing.T) {
	b := brokertest.Require(t)
	conn := b.Dial(t)
	q := brokertest.TinyDLQ()
	ctx, cancel := context.WithTimeout(context.Background(), 2*arrival)
	defer cancel()
	c, err := artemis.Dial(ctx, []string{b.URL}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })

	var log callLog
	var refused atomic.Int32
	cons := testkit.MustConsumer(t, artemis.Handlers{urnOrder: func(_ context.Context, env *artemis.Envelope, msg *amqp.Message) error {
		log.add(env, msg)
		return &gatewayError{}
	}}, artemis.WithRetryBackoff(shortSchedule), artemis.WithDeadLetterTimeout(time.Second),
		artemis.WithDeadLetterRetryDelay(100*time.Millisecond), artemis.WithLogger(quietLogger()),
		artemis.WithOnError(func(_ context.Context, err error, _ *artemis.Envelope, _ *amqp.Message) {
			if errors.Is(err, artemis.ErrRetryFailed) {
				refused.Add(1)
			}
		}))
	pub := artemis.NewPublisher(conn.NewSender(q), q)
	id, err := pub.Publish(ctx, artemis.Job(urnOrder, orderData(16)))
	require.NoError(t, err)
	testkit.ConsumeInBackground(t, c, q, cons, 2*arrival)

	r := conn.NewReceiver(q+".dlq", nil)
	dl := conn.Receive(r, 20*time.Second)
	if dl != nil {
		conn.Accept(r, dl)
	}
	time.Sleep(quiet)
	var attempts []int
	for _, c := range log.all() {
		attempts = append(attempts, c.attempts)
	}
	t.Logf("retry: every copy refused (full queue): %d handler calls (maxTries 3), attempts %v, %d copies refused, on %s.dlq: %t",
		len(attempts), attempts, refused.Load(), q, dl != nil)
	require.NotNil(t, dl, "the message never reached the DLQ")
	env, err := artemis.Decode([]byte(valueString(t, dl)))
	require.NoError(t, err)
	assert.Equal(t, id, env.Meta.ID)
	assert.Equal(t, []int{0, 1, 2}, attempts, "exactly maxTries calls, counting up")
	assert.Equal(t, int32(2), refused.Load(), "each refused copy reported")
	require.NotNil(t, env.DeadLetter)
	assert.Equal(t, 2, env.DeadLetter.Attempts)
}
