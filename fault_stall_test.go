//go:build faults

package artemis_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/ledger"
)

// TestFaultStallMidPublishAndConsume: one Client (default options) through
// a fault proxy publishes (8 goroutines, duplicate detection, a 5 s
// context per Publish, a failed one sent again with the same envelope) and
// consumes (4 handlers) at once, and the proxy stalls for 30 s in the
// middle of both: no byte carried, no FIN, no RST. Every Publish must
// return within about its 5 s (6 s allowed); after the heal both streams
// resume by themselves and nothing is lost or stored twice.
//
// The bound on handler duplicates: the deliveries in a handler when the
// stall began, the handlers that started during the stall before the
// Client declared the connection lost (nobody could know yet: their
// accepts went into the dead pipe), and one accept in flight per handler.
func TestFaultStallMidPublishAndConsume(t *testing.T) {
	fb := requireFaultBroker(t)
	const (
		publishes   = 10000
		consumes    = 6000
		stallAt     = 1500 // acknowledged publishes and handled messages before the stall
		stallFor    = 30 * time.Second
		perCall     = 5 * time.Second
		callLimit   = 6 * time.Second // "within ~5 s"
		concurrency = 4
		work        = 3 * time.Millisecond
	)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	qp, qc := faultQueue("stall-pub"), faultQueue("stall-con")
	l := ledger.New()
	l.ConsumeWindow(faultConsumeWindow(concurrency))
	faultFill(t, ctx, fb, qc, consumes, l)

	p, through := faultProxy(t, fb.Broker, 303)
	events := newFaultEvents()
	var stalled atomic.Bool
	var callsAtLoss atomic.Int64 // handler calls when the Client first saw the loss during the stall
	callsAtLoss.Store(-1)
	c := faultDefaultClient(t, []string{through}, func(ev artemis.ConnectionEvent) {
		if stalled.Load() && (ev.Kind == artemis.EventDisconnected || ev.Kind == artemis.EventConsumerLost) {
			callsAtLoss.CompareAndSwap(-1, int64(l.Calls()))
		}
		events.on(ev)
	})
	pub, err := c.Publisher(ctx, qp, artemis.WithDuplicateDetection())
	require.NoError(t, err)

	var st faultPubStats
	pubDone := faultPublishLoop(ctx, pub, qp, publishes, 8, perCall, callLimit, 0, l, &st)
	stopC := consumeInBackground(t, c, qc, faultLedgerConsumer(t, l, concurrency, work), nil, faultWait)

	acked := func() int { return l.Figures().Acked }
	deadline := time.Now().Add(2 * time.Minute)
	for (acked() < stallAt || l.Handled() < stallAt) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polls two counters of the ledger; bounded by deadline
	}
	require.GreaterOrEqual(t, acked(), stallAt, "publishing under way before the stall")
	require.GreaterOrEqual(t, l.Handled(), stallAt, "consuming under way before the stall")

	mark := events.mark()
	var callsAtStall int
	inHandler := l.CutAround(0, func() {
		callsAtStall = l.Calls()
		stalled.Store(true)
		p.Stall()
	})
	ackedAtStall, handledAtStall := acked(), l.Handled()
	time.Sleep(stallFor) // the fault's length: the scenario is "30 s without a byte"
	ackedDuringStall, handledDuringStall := acked()-ackedAtStall, l.Handled()-handledAtStall
	callsAtHeal := l.Calls()
	l.Mark(ledger.Publish, ledger.Consume)
	p.Heal()
	stalled.Store(false)
	healed := time.Now()

	waitClosed(t, pubDone, 3*time.Minute, func() string { return fmt.Sprintf("every publish (%d of %d)", acked(), publishes) })
	waitClosed(t, l.HandledAtLeast(consumes), 3*time.Minute, func() string {
		return fmt.Sprintf("every message to be handled (%d of %d); events: %s", l.Handled(), consumes, events.summary(mark))
	})
	finished := time.Since(healed)
	stopC()
	require.NoError(t, pub.Close(context.Background()))
	faultRecordStoredAndLeft(t, fb.Broker, l, qp)
	faultRecordLeft(t, fb.Broker, l, qc)

	// The bound's second part: handler starts during the stall before the
	// loss was seen (all those before the heal if it never was).
	startedBlind := callsAtHeal - callsAtStall
	if n := callsAtLoss.Load(); n >= 0 && int(n) < callsAtHeal {
		startedBlind = int(n) - callsAtStall
	}
	l.AddSlack(startedBlind + concurrency)
	f := faultReport(t, l, "30 s stall mid-publish and mid-consume",
		fmt.Sprintf("in a handler at the stall %d, started during the stall before the loss was seen %d", inHandler, startedBlind),
		fmt.Sprintf("during the stall: %d acknowledged, %d handled", ackedDuringStall, handledDuringStall),
		fmt.Sprintf("publishes over %v %d", callLimit, st.slow), st.String(),
		fmt.Sprintf("all done %.1f s after the heal", finished.Seconds()),
		fmt.Sprintf("events after the stall %s", events.summary(mark)))
	assert.Equal(t, publishes+consumes, f.Acked, "every publish acknowledged in the end (and the fill)")
	assert.Zero(t, st.slow, "publishes with a 5 s context that took longer than %v", callLimit)
	assert.LessOrEqual(t, st.maxLatency, callLimit, "the longest publish")
}
