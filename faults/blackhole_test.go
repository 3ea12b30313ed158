package faults_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/ledger"
)

// TestFaultBlackholedFirstURL: a Client dialled with the default options
// on two URLs, each a fault proxy in front of the same broker, publishes (8
// goroutines, duplicate detection) and consumes (4 handlers) over the
// first. Then the first is black-holed: its open connection stops carrying
// bytes (no FIN, no RST) and new connections to it are accepted but never
// reach the broker. Publishing and consuming must resume over the second
// URL within 20 s, and nothing may be lost or stored twice.
//
// The handler-duplicate bound is the stall's: the deliveries in a handler
// when the hole opened, those started on the dead connection before the
// Client saw the loss, and one accept in flight per handler; at least the
// link credit (creditFloor).
func TestFaultBlackholedFirstURL(t *testing.T) {
	const (
		publishes   = 8000
		consumes    = 8000
		holeAt      = 1500
		resumeIn    = 20 * time.Second // the target
		waitResume  = 30 * time.Second // how long the test waits before it reports "not resumed" and heals
		concurrency = 4
	)
	r := faultStart(t, faultSetup{
		timeout: 5 * time.Minute, pubQueue: "hole-pub", conQueue: "hole-con",
		publishes: publishes, consumes: consumes, concurrency: concurrency, work: 3 * time.Millisecond,
		consumeWindow: true,
		publishWindow: 8, // one outcome per publishing goroutine may have been read already
		seeds:         []uint64{601, 602},
	})
	l, p1, p2 := r.l, r.proxies[0], r.proxies[1]
	r.start(r.ctx)

	acked := func() int { return l.Figures().Acked - consumes }
	faultUnderWay(t, l, acked, holeAt, " on URL 1")
	require.Zero(t, p2.Stats().Accepted, "nothing used URL 2 before the fault")

	mark, inHandler, callsAtHole := r.fault(func() {
		p1.Blackhole()
		l.Mark(ledger.Publish, ledger.Consume)
	})
	holedAt := time.Now()
	for time.Since(holedAt) < waitResume {
		_, pp := l.Resume(ledger.Publish)
		_, cp := l.Resume(ledger.Consume)
		if !pp && !cp {
			break
		}
		time.Sleep(20 * time.Millisecond) // polls the ledger; bounded by waitResume
	}
	pubResume, pubPending := l.Resume(ledger.Publish)
	conResume, conPending := l.Resume(ledger.Consume)
	healedFirst := false
	if pubPending || conPending {
		p1.Heal() // let the run finish so the accounting is still complete
		healedFirst = true
	}
	callsAtResume := l.Calls()

	r.waitDone(acked, mark)
	r.stop(nil)

	startedBlind := r.addBlindSlack(callsAtHole, callsAtResume)
	credit := r.creditFloor()
	extra := []string{
		fmt.Sprintf("in a handler at the hole %d, started before the loss was seen %d, %s", inHandler, startedBlind, credit),
		fmt.Sprintf("connections to URL 2 %d", p2.Stats().Accepted), r.st.String(),
		fmt.Sprintf("events after the hole %s", r.events.summary(mark)),
	}
	if healedFirst {
		extra = append(extra, fmt.Sprintf("NOT resumed within %v: URL 1 healed to finish the run", waitResume))
	}
	f := faultReport(t, l, "black-holed first URL, healthy second", extra...)
	assert.Equal(t, publishes+consumes, f.Acked, "every publish acknowledged (and the fill)")
	assert.False(t, pubPending, "publishing resumed within %v", waitResume)
	assert.False(t, conPending, "consuming resumed within %v", waitResume)
	assert.LessOrEqual(t, pubResume, resumeIn, "publishing resumed on URL 2 within 20 s")
	assert.LessOrEqual(t, conResume, resumeIn, "consuming resumed on URL 2 within 20 s")
	assert.Positive(t, p2.Stats().Accepted, "URL 2 was used")
}
