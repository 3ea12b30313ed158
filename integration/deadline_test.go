package integration_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
)

// TestIntegrationACallersDeadlineIsItsOwn: many publishes in flight on one
// ClientPublisher behind 30 ms of latency (the fault proxy), a quarter of
// them with a context far too short for any broker to answer in, a quarter
// of them pipelined (PublishWithReceipt, the receipt waited for). The short ones may
// fail (with their context's error); every other publish succeeds, on the
// same connection (no loss, no re-dial), and what each caller was told
// matches the queue: every accepted id stored once, and nothing stored that
// was neither accepted nor possibly written by an impatient caller.
//
// Two causes are covered: a publish that ended by its own context marked
// the shared link broken, so the next publish replaced it and every transfer
// still waiting on it failed; and go-amqp drops a transfer frame whose
// context ends after it was given a delivery number, which makes Artemis
// close the whole connection ("Expected delivery-id N, got N+1"), so the
// write itself must not be cut by the caller's context.
func TestIntegrationACallersDeadlineIsItsOwn(t *testing.T) {
	b, conn, q := onBroker(t)
	p, through := testkit.FaultProxy(t, b, 17)
	p.Latency(30 * time.Millisecond)

	events := make(chan artemis.ConnectionEvent, 1024)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := artemis.Dial(ctx, []string{through}, &artemis.ClientOptions{OnEvent: func(ev artemis.ConnectionEvent) {
		select {
		case events <- ev:
		default:
		}
	}})
	require.NoError(t, err)
	defer c.Close(context.Background())
	pub, err := c.Publisher(ctx, q)
	require.NoError(t, err)

	const rounds, perRound, impatientEvery = 4, 64, 4
	var (
		mu         sync.Mutex
		accepted   = map[string]bool{}
		patientErr []error
		impatient  int
	)
	for round := range rounds {
		var wg sync.WaitGroup
		for i := range perRound {
			wg.Go(func() {
				d := 10 * time.Second
				short := i%impatientEvery == 0
				if short {
					d = time.Millisecond
				}
				pctx, pcancel := context.WithTimeout(ctx, d)
				defer pcancel()
				data := map[string]int{"round": round, "i": i}
				var id string
				var err error
				if i%impatientEvery == 1 { // a pipelined publish: its receipt is waited for
					var r *artemis.Receipt
					if r, err = pub.PublishWithReceipt(pctx, artemis.Job("urn:babel:orders:created", data)); err == nil {
						id, err = r.ID(), r.Wait(pctx)
					}
				} else {
					id, err = pub.Publish(pctx, artemis.Job("urn:babel:orders:created", data))
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					accepted[id] = true
				case short:
					impatient++
					assert.True(t, errors.Is(err, context.DeadlineExceeded), "an impatient publish fails with its own deadline: %v", err)
				default:
					patientErr = append(patientErr, err)
				}
			})
		}
		wg.Wait()
	}
	require.Empty(t, patientErr, "publishes with a 10 s context failed beside impatient ones: %v", firstErrors(patientErr, 3))

	// The connection was never lost: no re-dial, no re-attach.
	close(events)
	for ev := range events {
		switch ev.Kind {
		case artemis.EventDisconnected, artemis.EventReconnected, artemis.EventSenderReattached:
			t.Errorf("the healthy connection was disturbed: %v", ev)
		}
	}
	stored := map[string]int{}
	for _, m := range conn.Drain(q, "") {
		stored[fmt.Sprint(m.Properties.MessageID)]++
	}
	var extra int
	for id, n := range stored {
		assert.Equal(t, 1, n, "stored once: %s", id)
		if !accepted[id] {
			extra++ // an impatient publish whose transfer was written before its deadline
		}
	}
	for id := range accepted {
		assert.Equal(t, 1, stored[id], "accepted and stored: %s", id)
	}
	assert.LessOrEqual(t, extra, impatient, "stored without being accepted: only impatient publishes")
	t.Logf("%d publishes: %d accepted, %d impatient failed (%d of those stored anyway), 0 patient failed",
		rounds*perRound, len(accepted), impatient, extra)
}

func firstErrors(errs []error, n int) []error {
	return errs[:min(n, len(errs))]
}
