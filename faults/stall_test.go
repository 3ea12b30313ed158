package faults_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

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
// accepts went into the dead pipe), and one accept in flight per handler;
// at least the link credit (creditFloor: with 3 ms handler calls a handler
// can have two accepts on the way when the stall begins, and every
// delivery the broker held unsettled may come back).
func TestFaultStallMidPublishAndConsume(t *testing.T) {
	const (
		publishes   = 10000
		consumes    = 6000
		stallAt     = 1500 // acknowledged publishes and handled messages before the stall
		stallFor    = 30 * time.Second
		callLimit   = 6 * time.Second // "within ~5 s"
		concurrency = 4
	)
	r := faultStart(t, faultSetup{
		timeout: 5 * time.Minute, pubQueue: "stall-pub", conQueue: "stall-con",
		publishes: publishes, consumes: consumes, concurrency: concurrency, work: 3 * time.Millisecond,
		consumeWindow: true,
		seeds:         []uint64{303},
		perCall:       5 * time.Second, limit: callLimit,
	})
	l, p, st := r.l, r.proxies[0], &r.st
	r.start(r.ctx)

	acked := func() int { return l.Figures().Acked - consumes } // the fill is acknowledged before the start
	faultUnderWay(t, l, acked, stallAt, " before the stall")

	// r.loss notes the handler calls when the Client first saw the loss
	// during the stall.
	mark, inHandler, callsAtStall := r.fault(p.Stall)
	ackedAtStall, handledAtStall := acked(), l.Handled()
	time.Sleep(stallFor) // the fault's length: the scenario is "30 s without a byte"
	ackedDuringStall, handledDuringStall := acked()-ackedAtStall, l.Handled()-handledAtStall
	callsAtHeal := l.Calls()
	l.Mark(ledger.Publish, ledger.Consume)
	p.Heal()
	r.loss.armed.Store(false)
	healed := time.Now()

	r.waitDone(acked, mark)
	finished := time.Since(healed)
	r.stop(nil)

	// The bound's second part: handler starts during the stall before the
	// loss was seen (all those before the heal if it never was).
	startedBlind := r.addBlindSlack(callsAtStall, callsAtHeal)
	credit := r.creditFloor()
	f := faultReport(t, l, "30 s stall mid-publish and mid-consume",
		fmt.Sprintf("in a handler at the stall %d, started during the stall before the loss was seen %d, %s", inHandler, startedBlind, credit),
		fmt.Sprintf("during the stall: %d acknowledged, %d handled", ackedDuringStall, handledDuringStall),
		fmt.Sprintf("publishes over %v %d", callLimit, st.slow), st.String(),
		fmt.Sprintf("all done %.1f s after the heal", finished.Seconds()),
		fmt.Sprintf("events after the stall %s", r.events.summary(mark)))
	assert.Equal(t, publishes+consumes, f.Acked, "every publish acknowledged in the end (and the fill)")
	assert.Zero(t, st.slow, "publishes with a 5 s context that took longer than %v", callLimit)
	assert.LessOrEqual(t, st.maxLatency, callLimit, "the longest publish")
}
