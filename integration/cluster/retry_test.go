package cluster_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
)

// Scheduled retries on a cluster wait on the member each message came
// from; the member holding the most is SIGKILLed while they wait and
// restarted: its copies come back with it, at their time (or at once, when
// it is past), each message is handled once more, with attempts 1 (the
// copy's body count, which the Client's attempt memory agrees with), and
// nothing reaches a dead-letter queue.
func TestClusterScheduledRetriesComeBackWithTheirMember(t *testing.T) {
	cl := brokertest.RequireCluster(t)
	const n, wait = 60, 10 * time.Second
	q := queueName(t, "retrykill")
	c := dialCluster(t, cl, nil)
	p, err := c.Publisher(context.Background(), q)
	require.NoError(t, err)
	acked := publishAll(t, p, n, 20, func(i int) (any, []artemis.PublishOption) { return order{Seq: i}, nil })

	var mu sync.Mutex
	failedAt := map[string]time.Time{}
	var early, wrong int
	done := newTally(n)
	stop := consume(t, c, q, func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if env.Attempts == 0 {
			if _, ok := failedAt[env.Meta.ID]; !ok {
				failedAt[env.Meta.ID] = time.Now()
			}
			return errors.New("dependency down")
		}
		if env.Attempts != 1 {
			wrong++
		}
		if at, ok := failedAt[env.Meta.ID]; ok && time.Now().Before(at.Add(wait-50*time.Millisecond)) {
			early++
		}
		done.add(env.Meta.ID)
		return nil
	}, artemis.WithConcurrency(4), artemis.WithRetrySchedule(func(int) time.Duration { return wait }))

	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(failedAt) == n }, 30*time.Second, 20*time.Millisecond,
		"every first attempt failed")
	waiting := counts(t, cl, q) // scheduled messages count in a queue's messageCount
	victim, most := 1, -1
	for i, k := range waiting {
		if k > most {
			victim, most = i+1, k
		}
	}
	killedAt := cl.KillNode(t, victim)
	restartTook := cl.RestartNode(t, victim)
	done.wait(t, 2*time.Minute)
	backAfter := time.Since(killedAt)
	time.Sleep(time.Second) // a late duplicate would show now
	stop()
	lost, extra, dups := done.figures(acked)
	dead := counts(t, cl, q+".dlq")
	mu.Lock()
	defer mu.Unlock()
	line("scheduled retries (%v) waiting on the members %v; killed member %d (%d waiting) and restarted it in %.1f s: all handled %.1f s after the kill; lost %d, unknown ids %d, handled twice %d, before their time %d, attempts other than 1: %d; on the DLQs %v",
		wait, waiting, victim, most, restartTook.Seconds(), backAfter.Seconds(), lost, extra, dups, early, wrong, dead)
	assert.Positive(t, most, "the victim held no waiting retry: the test did not test")
	assert.Zero(t, lost)
	assert.Zero(t, extra)
	assert.Zero(t, dups)
	assert.Zero(t, early, "a copy came before its time")
	assert.Zero(t, wrong, "the retry's attempts are the copy's body count")
	assert.Equal(t, []int{0, 0, 0}, dead)
}

// A large failing message (200 KiB: Artemis 2.40 redelivers it with
// delivery-count 0 every time) on a cluster gets exactly maxTries handler
// calls, attempts 0, 1, 2, by the scheduled copies' body count, then one
// record on a member's <queue>.dlq.
func TestClusterLargeFailingMessageGetsMaxTries(t *testing.T) {
	cl := brokertest.RequireCluster(t)
	q := queueName(t, "retrylarge")
	c := dialCluster(t, cl, nil)
	p, err := c.Publisher(context.Background(), q)
	require.NoError(t, err)
	id, err := p.Publish(context.Background(), artemis.Job(urn, map[string]any{"seq": 1, "pad": strings.Repeat("x", 200*1024)}))
	require.NoError(t, err)
	var mu sync.Mutex
	var attempts []int
	stop := consume(t, c, q, func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		mu.Lock()
		attempts = append(attempts, env.Attempts)
		mu.Unlock()
		return errors.New("always fails")
	}, artemis.WithRetryBackoff(artemis.Backoff{Initial: 200 * time.Millisecond, Max: time.Second, Multiplier: 2}))
	dl := newTally(1)
	var dlAttempts int
	stopDL := consume(t, c, q+".dlq", func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		dlAttempts = env.DeadLetter.Attempts
		dl.add(env.Meta.ID)
		return nil
	})
	dl.wait(t, time.Minute)
	time.Sleep(time.Second) // a further delivery would show now
	stop()
	stopDL()
	mu.Lock()
	defer mu.Unlock()
	line("large failing message (200 KiB), scheduled retries: %d handler calls, attempts %v, on a member's DLQ with attempts %d; same id %t",
		len(attempts), attempts, dlAttempts, dl.calls[id] == 1)
	assert.Equal(t, []int{0, 1, 2}, attempts)
	assert.Equal(t, 2, dlAttempts)
	assert.Equal(t, 1, dl.calls[id])
}
