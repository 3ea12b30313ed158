package faults_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/ledger"
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
)

// faultFailure is the handler's error in the dead-letter test.
type faultFailure struct{}

func (*faultFailure) Error() string { return "ledger rejected the entry" }

// TestFaultDeadLetterLinkLostAndBack runs a consumer whose handler always
// fails, so each message ends on <queue>.dlq after 2 deliveries, and takes
// the dead-letter link away mid-run by SIGKILLing the broker while
// handlers are about to dead-letter.
//
// (Deleting the dead-letter queue or its address through the CLI does not
// detach an attached AMQP sender link on Artemis 2.40: later transfers are
// accepted and auto-create the queue again. A kill does detach it.)
//
// The dead-letter writes attempted while the broker is down fail and are
// reported as ErrDeadLetterFailed; their sources are never accepted, so
// Artemis redelivers them after the restart, and once the Client has
// re-attached the dead-letter link every message is on the DLQ, counted
// by meta.id.
//
// A DLQ copy carries no duplicate id (a redriven message that fails again
// must reach the DLQ again), so a dead-lettering repeated because the
// source's accept died with the broker is a second visible copy: the
// ledger counts each message once on the DLQ, and the extra copies are
// bounded by the deliveries in flight (credit plus one per handler) and
// printed in the line. Nothing may be lost.
// Handler calls beyond the 2 each message is meant to get are bounded by
// the deliveries in a handler at the kill plus one settlement in flight
// per handler goroutine.
func TestFaultDeadLetterLinkLostAndBack(t *testing.T) {
	const (
		total    = 600
		killAt   = 200 // deliveries at the limit before the kill
		maxTries = 2
	)
	const concurrency, credit = faultKillConcurrency, faultKillCredit
	r := faultKillStart(t, 5*time.Minute, "dlq", total, 4, killAt, func(l *ledger.Ledger) { l.ExpectCalls(maxTries) })
	fb, q, l, sent, park := r.fb, r.q, r.l, r.sent, r.park
	defer park.release()
	dlq := q + ".dlq"

	var limitCalls, calls atomic.Int64

	reports := newFaultReports(artemis.KindHandlerFailed, artemis.KindDeadLetterFailed, artemis.KindSettlement)
	var dlMu sync.Mutex
	deadLettered := map[string]int{}
	allDone := make(chan struct{})
	onError := func(ctx context.Context, err error, env *artemis.Envelope, msg *amqp.Message) {
		reports.onError(ctx, err, env, msg)
		var de *artemis.DeliveryError
		if errors.As(err, &de) && errors.Is(de, artemis.ErrHandlerFailed) && de.Disposition == artemis.DispositionDeadLettered {
			dlMu.Lock()
			deadLettered[de.MessageID]++
			if len(deadLettered) == total && deadLettered[de.MessageID] == 1 {
				close(allDone)
			}
			dlMu.Unlock()
		}
	}
	cons := testkit.MustConsumer(t, artemis.Handlers{faultURN: func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		done := l.Start(env.Meta.ID)
		defer done(false) // always fails: dead-lettered after maxTries
		calls.Add(1)
		if env.Attempts >= maxTries-1 {
			park.call(limitCalls.Add(1)) // from the killAt-th: dead-letter only once the broker is dead
		}
		return &faultFailure{}
	}},
		artemis.WithMaxTries(maxTries),
		artemis.WithRetrySchedule(nil), // retried at once: the scenario is the dead-letter writes
		artemis.WithConcurrency(concurrency),
		artemis.WithDeadLetterTimeout(10*time.Second),
		artemis.WithDeadLetterRetryDelay(100*time.Millisecond),
		artemis.WithOnError(onError),
		artemis.WithCredit(credit))

	events, stop, _ := faultConsumeDirect(t, fb, q, cons)
	events.wait(t, 0, artemis.EventSenderAttached, dlq, faultWait)
	events.wait(t, 0, artemis.EventConsumerAttached, q, faultWait)

	k := park.kill(t, fb, l, events, concurrency, func() string {
		return fmt.Sprintf("%d deliveries at the limit (have %d)", killAt, limitCalls.Load())
	}, nil)
	mark, killedAt := k.mark, k.ended
	// The parked handlers dead-letter into a dead broker: reported, held,
	// released (the release fails too: the link is gone).
	waitClosed(t, reports.first[artemis.KindDeadLetterFailed], faultWait, func() string { return "an ErrDeadLetterFailed report" })
	events.wait(t, mark, artemis.EventConsumerLost, q, faultWait)
	failedDuringOutage := reports.ids(artemis.KindDeadLetterFailed)
	restartAt := time.Now()
	fb.restart(t)
	restarted := time.Now()
	events.wait(t, mark, artemis.EventConsumerResumed, q, faultWait)
	events.wait(t, mark, artemis.EventSenderReattached, dlq, faultWait)
	resumed := time.Now()

	waitClosed(t, allDone, 3*time.Minute, func() string {
		dlMu.Lock()
		defer dlMu.Unlock()
		return fmt.Sprintf("every message to be dead-lettered (have %d of %d)", len(deadLettered), total)
	})
	stop()
	onDLQ := faultDrain(t, fb.Broker, dlq)
	left := faultDrain(t, fb.Broker, q)
	once := make(map[string]int, len(onDLQ.copies))
	for id := range onDLQ.copies {
		once[id] = 1 // extra DLQ copies are bounded below, not "stored twice"
	}
	l.Stored(once)
	l.Left(dlq, once)
	l.Left(q, left.copies)

	var missing, duplicated, foreign, badBlock int
	for id := range sent {
		n := onDLQ.copies[id]
		if n == 0 {
			missing++
		}
		if n > 1 {
			duplicated += n - 1
		}
	}
	for id := range onDLQ.copies {
		if _, ok := sent[id]; !ok {
			foreign++
		}
	}
	for _, env := range onDLQ.envs {
		dl := env.DeadLetter
		if dl == nil || dl.Reason != artemis.ReasonFailed || dl.OriginalQueue != q || dl.Error == nil || *dl.Error != "ledger rejected the entry" {
			badBlock++
		}
	}
	var failedThenDLQ int
	for id := range failedDuringOutage {
		if onDLQ.copies[id] > 0 {
			failedThenDLQ++
		}
	}

	t.Logf("FIGURES dead-letter: sent=%d on DLQ(unique)=%d missing=%d duplicated=%d DLQ copies=%d left on source=%d handler calls=%d",
		total, len(onDLQ.copies), missing, duplicated, onDLQ.total, left.total, calls.Load())
	t.Logf("FIGURES dead-letter: writes failed while the broker was down: %d messages (%d of them on the DLQ now)",
		len(failedDuringOutage), failedThenDLQ)
	t.Logf("FIGURES dead-letter: events after the kill: %s", events.summary(mark))
	reports.log(t)
	faultReport(t, l, "broker SIGKILLed while dead-lettering",
		fmt.Sprintf("resume %d ms after the restart (dead-letter link back; restart issued %d ms after the kill, took %d ms)",
			resumed.Sub(restarted).Milliseconds(), restartAt.Sub(killedAt).Milliseconds(), restarted.Sub(restartAt).Milliseconds()),
		fmt.Sprintf("in a handler at the kill %d", k.inHandler),
		fmt.Sprintf("messages %d, on the DLQ %d (copies %d, extra copies %d, bound %d), dead-letter writes failed during the outage %d",
			total, len(onDLQ.copies), onDLQ.total, duplicated, credit+concurrency, len(failedDuringOutage)))

	assert.Zero(t, missing, "messages neither dead-lettered nor left on the source")
	assert.Zero(t, foreign, "DLQ copies of messages that were not sent")
	assert.Zero(t, badBlock, "DLQ copies without the right dead_letter block")
	assert.LessOrEqual(t, duplicated, credit+concurrency, "duplicate DLQ copies stay within the in-flight window")
	assert.NotEmpty(t, failedDuringOutage, "dead-letter writes failed while the link was gone")
	assert.Equal(t, len(failedDuringOutage), failedThenDLQ, "each source whose dead-letter write failed was released, not lost, and ended on the DLQ")
	assert.Zero(t, left.total, "nothing left on the source queue")
}
