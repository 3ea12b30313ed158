package faults_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/ledger"
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
)

const (
	faultResetTotal = 20000 // issue 13, part 7: 20,000 publishes, 20,000 consumes
	faultResetMin   = time.Second
	faultResetMax   = 3 * time.Second
)

// TestFaultResetsUnderPublish: 20,000 duplicate-detected publishes from 8
// goroutines through one Client.Publisher (default options) while a fault
// proxy resets the connection every 1 to 3 s. Each goroutine waits 6 ms
// after an acknowledged publish, so the run spans several resets (at most
// about 1,300/s: 15 s or more). A failed publish is sent
// again with the same envelope. Every acknowledged message is on the
// queue, once.
func TestFaultResetsUnderPublish(t *testing.T) {
	r := faultStart(t, faultSetup{
		timeout: 5 * time.Minute, pubQueue: "reset-pub", publishes: faultResetTotal,
		publishWindow: 8, // one outcome per publishing goroutine may have been read before the reset
		seeds:         []uint64{101},
		pace:          6 * time.Millisecond,
	})
	ctx, l, p := r.ctx, r.l, r.proxies[0]
	stop := make(chan struct{})
	resets := faultEvery(stop, faultResetMin, faultResetMax, 7, func() {
		l.Mark(ledger.Publish)
		p.Reset()
	})
	start := time.Now()
	r.start(ctx)
	select {
	case <-r.pubDone:
	case <-ctx.Done():
	}
	elapsed := time.Since(start)
	close(stop)
	nResets := <-resets
	require.NoError(t, r.pub.Close(context.Background()))
	faultRecordStoredAndLeft(t, r.fb.Broker, l, r.qp)

	f := faultReport(t, l, "resets under publish",
		fmt.Sprintf("%d publishes in %.1f s (%.0f/s)", faultResetTotal, elapsed.Seconds(), faultRate(faultResetTotal, elapsed)),
		fmt.Sprintf("resets %d", nResets), r.st.String(),
		fmt.Sprintf("library retries %d", r.events.count(0, artemis.EventPublishRetried)))
	assert.Equal(t, faultResetTotal, f.Acked, "every publish was acknowledged in the end")
	assert.Positive(t, nResets, "the proxy reset the connection")
}

// TestFaultResetsUnderConsume: a Client.Consume (default options, 4
// handlers, default credit) reads 20,000 messages through a fault proxy
// that resets the connection every 1 to 3 s. It must keep at least half
// the rate it has without faults, measured first in the same test on
// 4,000 messages through the same proxy. Handler-visible duplicates are
// bounded by the deliveries in a handler at each reset, plus one accept in
// flight per handler goroutine (an accept written just before the RST is
// lost with the connection and the broker redelivers it).
func TestFaultResetsUnderConsume(t *testing.T) {
	fb := requireFaultBroker(t)
	const (
		baseline    = 4000
		concurrency = 4
		work        = 3 * time.Millisecond // per message: 20,000 take about 15 s, several resets
	)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	qb, q := faultQueue("reset-base"), faultQueue("reset-con")
	lb, l := ledger.New(), ledger.New()
	l.ConsumeWindow(faultConsumeWindow(concurrency))
	faultFill(t, ctx, fb, qb, baseline, lb)
	faultFill(t, ctx, fb, q, faultResetTotal, l)

	p, through := testkit.FaultProxy(t, fb.Broker, 202)
	events := newFaultEvents()
	c := faultDefaultClient(t, []string{through}, events.on)

	// Fault-free rate, same proxy, same Client.
	startB := time.Now()
	stopB := testkit.ConsumeInBackground(t, c, qb, faultLedgerConsumer(t, lb, concurrency, work), faultWait)
	waitClosed(t, lb.HandledAtLeast(baseline), 3*time.Minute, func() string {
		return fmt.Sprintf("the fault-free baseline (%d of %d handled)", lb.Handled(), baseline)
	})
	baseElapsed := time.Since(startB)
	stopB()
	baseRate := faultRate(baseline, baseElapsed)

	stop := make(chan struct{})
	resets := faultEvery(stop, faultResetMin, faultResetMax, 9, func() {
		l.Mark(ledger.Consume)
		l.CutAround(concurrency, func() { p.Reset() })
	})
	// Half the fault-free rate is the target: by this deadline a consumer
	// that keeps it has handled everything (10 s added for the start).
	deadline := time.Duration(float64(faultResetTotal)/(baseRate/2)*float64(time.Second)) + 10*time.Second
	start := time.Now()
	stopC := testkit.ConsumeInBackground(t, c, q, faultLedgerConsumer(t, l, concurrency, work), faultWait)
	select {
	case <-l.HandledAtLeast(faultResetTotal):
	case <-time.After(deadline):
	}
	elapsed := time.Since(start)
	handled := l.Handled()
	close(stop)
	nResets := <-resets
	stopC()
	rate := faultRate(handled, elapsed)
	faultRecordLeft(t, fb.Broker, l, q)
	faultRecordLeft(t, fb.Broker, lb, qb)

	faultReport(t, l, "resets under consume",
		fmt.Sprintf("rate %.0f/s vs %.0f/s fault-free (%.2fx)", rate, baseRate, rate/baseRate),
		fmt.Sprintf("%d of %d messages handled in %.1f s (deadline %.1f s)", handled, faultResetTotal, elapsed.Seconds(), deadline.Seconds()),
		fmt.Sprintf("resets %d", nResets),
		fmt.Sprintf("events %s", events.summary(0)))
	fb0 := lb.Figures()
	assert.Zero(t, fb0.HandlerDuplicates, "no duplicates without faults")
	assert.Positive(t, nResets)
	assert.Equal(t, faultResetTotal, handled, "every message handled by the deadline of half the fault-free rate")
	assert.GreaterOrEqual(t, rate, baseRate/2, "under resets every 1 to 3 s the consumer keeps at least half its fault-free rate")
}
