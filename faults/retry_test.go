package faults_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
)

// The retry child: this test binary run again with BQFAULT_CHILD=retry
// (child_test.go). Its handler fails every first attempt (attempts 0),
// writing "F <unix ns> <meta.id>", and handles every later one, writing
// "S <unix ns> <meta.id> <attempts>"; each line one write(2) on an
// O_APPEND file (runFaultChild's log). Its retries wait faultRetryWait.
const (
	faultRetryWait    = 15 * time.Second
	faultRetryWorkers = 4
)

func faultRetryConsume() int {
	return runFaultChild("fault retry child", func(record faultRecord) (*artemis.Consumer, error) {
		return artemis.NewConsumer(artemis.Handlers{faultURN: func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
			if env.Attempts == 0 {
				record("F", env.Meta.ID)
				return errors.New("dependency down")
			}
			record("S", env.Meta.ID, env.Attempts)
			return nil
		}}, artemis.WithConcurrency(faultRetryWorkers), artemis.WithLogger(slog.New(slog.DiscardHandler)),
			artemis.WithRetrySchedule(func(int) time.Duration { return faultRetryWait }))
	})
}

// retryLog holds the retry child's lines as they come.
type retryLog struct {
	*faultTail
	failed  map[string]time.Time   // meta.id -> its first failure
	handled map[string][]time.Time // meta.id -> every successful call
}

// line books one line of the log.
func (l *retryLog) line(parts []string, at time.Time) {
	id := parts[2]
	switch parts[0] {
	case "F":
		if _, ok := l.failed[id]; !ok {
			l.failed[id] = at
		}
	case "S":
		l.handled[id] = append(l.handled[id], at)
	}
}

// TestFaultScheduledRetriesSurviveAConsumerKill: a consumer process fails
// the first attempt of 1,000 messages, each then waits 15 s on the broker
// as a scheduled copy; the process is SIGKILLed while they wait, and a new
// one started. Every message comes back at its time (not before its
// failure + 15 s), is handled once, and nothing is dead-lettered or lost.
// A message whose source's accept was in flight at the kill may come back
// at once as well as at its time: at most one per handler goroutine.
func TestFaultScheduledRetriesSurviveAConsumerKill(t *testing.T) {
	fb := requireFaultBroker(t)
	const total = 1000
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	q := faultQueue("retrykill")
	sent := faultPublish(t, ctx, fb, q, total, 8)

	logPath := t.TempDir() + "/retry.log"
	rl := &retryLog{failed: map[string]time.Time{}, handled: map[string][]time.Time{}}
	rl.faultTail = newFaultTail(t, logPath, rl.line)
	status := func() string {
		return fmt.Sprintf("failed %d, handled %d of %d", len(rl.failed), len(rl.handled), total)
	}
	poll := func(until func() bool, what string, within time.Duration) { rl.poll(t, until, what, within, status) }

	child := startFaultChild(t, faultModeRetry, q, logPath)
	poll(func() bool { return len(rl.failed) >= total }, "every first attempt failed", 2*time.Minute)
	var firstFail, lastFail time.Time
	for _, at := range rl.failed {
		if firstFail.IsZero() || at.Before(firstFail) {
			firstFail = at
		}
		if at.After(lastFail) {
			lastFail = at
		}
	}
	require.Less(t, time.Since(firstFail), faultRetryWait-3*time.Second, "the failures took too long to kill while all wait")
	killedAt := child.kill(t)
	rl.read(t)
	early := len(rl.handled) // handled before the kill: none should be
	scheduled := -1
	if fb.HasCLI() {
		st, err := fb.Stat(ctx, q)
		require.NoError(t, err)
		scheduled = st.ScheduledCount
	}
	child = startFaultChild(t, faultModeRetry, q, logPath)
	poll(func() bool { return len(rl.handled) >= total }, "every message handled after its wait", 2*time.Minute)
	lastHandled := time.Now()
	child.stop(t)
	rl.read(t)
	left := faultDrain(t, fb.Broker, q)
	dead := faultDrain(t, fb.Broker, q+".dlq")

	var late []time.Duration
	twice, beforeTime, lost := 0, 0, 0
	for id := range sent {
		calls := rl.handled[id]
		if len(calls) == 0 {
			if left.copies[id] == 0 && dead.copies[id] == 0 {
				lost++
			}
			continue
		}
		if len(calls) > 1 {
			twice++
		}
		due := rl.failed[id].Add(faultRetryWait)
		for _, at := range calls {
			if at.Before(due.Add(-50 * time.Millisecond)) {
				beforeTime++ // a source whose accept was in flight at the kill
				continue
			}
			late = append(late, at.Sub(due))
		}
	}
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	p50, worst := time.Duration(0), time.Duration(0)
	if len(late) > 0 {
		p50, worst = late[len(late)/2], late[len(late)-1]
	}
	fmt.Printf("fault: scheduled retries through a consumer SIGKILL: %d messages failed once in %.1f s and waited %v each, killed %.1f s after the first failure "+
		"(scheduled on the broker at the kill: %d), lost %d, dead-lettered %d, left on the queue %d, handled twice %d (bound %d), handled before their time %d, "+
		"after it: median %d ms late, at most %d ms; all handled %.1f s after the kill\n",
		total, lastFail.Sub(firstFail).Seconds(), faultRetryWait, killedAt.Sub(firstFail).Seconds(), scheduled, lost, dead.total, left.total,
		twice, faultRetryWorkers, beforeTime, p50.Milliseconds(), worst.Milliseconds(), lastHandled.Sub(killedAt).Seconds())
	assert.Zero(t, early, "no message was handled before the kill: each waits its 15 s")
	assert.Zero(t, lost, "lost")
	assert.Zero(t, dead.total, "dead-lettered")
	assert.Zero(t, left.total, "left on the queue")
	assert.LessOrEqual(t, twice, faultRetryWorkers, "handled twice: at most one accept in flight per handler goroutine at the kill")
	assert.LessOrEqual(t, beforeTime, faultRetryWorkers)
	assert.Less(t, worst, 15*time.Second, "a message came back long after its time")
	if scheduled >= 0 {
		assert.GreaterOrEqual(t, scheduled, total-faultRetryWorkers, "the copies wait on the broker")
	}
}

// TestFaultRetryOutageUnderLoad: a dependency of the handler is down for
// 20 s while messages arrive at about 100 a second, with the default retry
// schedule and maxTries (Client.Consume, 4 handlers). Nothing is
// dead-lettered or lost, each message is handled once, and the backlog of
// retries drains after the recovery.
func TestFaultRetryOutageUnderLoad(t *testing.T) {
	fb := requireFaultBroker(t)
	const rate, publishFor, outageAt, outage = 100, 30 * time.Second, 5 * time.Second, 20 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	q := faultQueue("retryoutage")
	c := faultDial(t, fb, nil)
	start := time.Now()
	down, up := start.Add(outageAt), start.Add(outageAt+outage)
	var mu sync.Mutex
	handled := map[string]int{}
	var calls, failed atomic.Int64
	cons := testkit.MustConsumer(t, artemis.Handlers{faultURN: func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		calls.Add(1)
		if now := time.Now(); now.After(down) && now.Before(up) {
			failed.Add(1)
			return errors.New("database unavailable")
		}
		mu.Lock()
		handled[env.Meta.ID]++
		mu.Unlock()
		return nil
	}}, artemis.WithConcurrency(4), artemis.WithLogger(slog.New(slog.DiscardHandler)))
	testkit.ConsumeInBackground(t, c, q, cons, faultWait)

	pub, err := c.Publisher(ctx, q)
	require.NoError(t, err)
	var sent []string
	tick := time.NewTicker(time.Second / rate)
	for time.Since(start) < publishFor {
		<-tick.C
		id, err := pub.Publish(ctx, artemis.Job(faultURN, faultData{Seq: len(sent)}))
		require.NoError(t, err)
		sent = append(sent, id)
	}
	tick.Stop()
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(handled) }
	deadline := time.Now().Add(2 * time.Minute)
	for count() < len(sent) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond) // the handlers run in this process, the retries on the broker's clock
	}
	drained := time.Since(up)
	time.Sleep(faultDrainIdle)
	dead := faultDrain(t, fb.Broker, q+".dlq")
	left := faultDrain(t, fb.Broker, q)
	mu.Lock()
	defer mu.Unlock()
	lost, twice := 0, 0
	for _, id := range sent {
		switch n := handled[id]; {
		case n == 0 && left.copies[id] == 0 && dead.copies[id] == 0:
			lost++
		case n > 1:
			twice++
		}
	}
	fmt.Printf("fault: a 20 s outage of the handler's dependency under %d msg/s, default retry schedule and maxTries: %d published, lost %d, dead-lettered %d, "+
		"handled twice %d, handler calls %d (failed %d), every message handled %.1f s after the recovery\n",
		rate, len(sent), lost, dead.total, twice, calls.Load(), failed.Load(), drained.Seconds())
	assert.Zero(t, lost, "lost")
	assert.Zero(t, dead.total, "dead-lettered")
	assert.Zero(t, left.total, "left on the queue")
	assert.Zero(t, twice, "handled twice")
	assert.Equal(t, len(sent), len(handled))
	assert.Positive(t, failed.Load(), "the outage failed nothing: the test did not test")
}
