package faults_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/ledger"
)

// TestFaultPublisherSurvivesBrokerKill publishes 5,000 messages from 8
// goroutines through one ClientPublisher with duplicate detection while
// the broker is SIGKILLed and restarted. A publish that fails is retried
// by the caller with the same envelope (same meta.id, same duplicate id),
// as Client.Publisher's documentation says to. Every publish that returned
// nil must be on the queue, each message exactly once.
func TestFaultPublisherSurvivesBrokerKill(t *testing.T) {
	const (
		total     = 5000
		workers   = 8
		killAfter = 1500 // acknowledged publishes
	)
	// The publish loop is this test's own (it keeps what each publish
	// returned); the set-up is the scenarios' on a Client straight to the
	// broker it kills.
	r := faultStart(t, faultSetup{timeout: 6 * time.Minute, pubQueue: "publish", direct: true})
	fb, ctx, q, events, pub, l := r.fb, r.ctx, r.qp, r.events, r.pub, r.l

	var (
		mu        sync.Mutex
		acked     = make(map[string]int, total) // meta.id -> seq, publishes that returned nil
		failures  = map[string]int{}
		samples   = map[string]string{}
		retried   = map[string]bool{} // meta.ids sent again after an error
		ambiguous = map[string]bool{} // meta.ids with an unknown outcome
		next      atomic.Int64
		okCount   atomic.Int64
		killNow   = make(chan struct{})
		wg        sync.WaitGroup
		fatal     = make(chan error, workers)
	)
	pause := artemis.Backoff{Initial: 50 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.5}
	classify := func(err error) string {
		if kind := faultErrKind(err); kind != "ErrClosed" {
			return kind
		}
		return "other" // a closed publisher is not an error this test expects
	}
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := int(next.Add(1) - 1); seq < total; seq = int(next.Add(1) - 1) {
				env, err := artemis.NewEnvelope(faultURN, faultData{Seq: seq}, artemis.EnvelopeQueue(q))
				if err != nil {
					fatal <- err
					return
				}
				for attempt := 0; ; attempt++ {
					pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
					id, err := pub.Publish(pctx, env)
					pcancel()
					if err == nil {
						l.Acked(id)
						mu.Lock()
						acked[id] = seq
						if attempt > 0 {
							retried[id] = true
						}
						mu.Unlock()
						if okCount.Add(1) == killAfter {
							close(killNow)
						}
						break
					}
					if ctx.Err() != nil {
						fatal <- fmt.Errorf("seq %d: the test's deadline passed: %w", seq, err)
						return
					}
					kind := classify(err)
					mu.Lock()
					failures[kind]++
					if _, ok := samples[kind]; !ok {
						samples[kind] = err.Error()
					}
					if kind == "ErrOutcomeUnknown" {
						ambiguous[env.Meta.ID] = true
						l.Unknown(env.Meta.ID)
					}
					mu.Unlock()
					select {
					case <-time.After(pause.Delay(attempt, rand.Float64())):
					case <-ctx.Done():
					}
				}
			}
		}()
	}
	workersDone := make(chan struct{})
	go func() { wg.Wait(); close(workersDone) }()

	waitClosed(t, killNow, 3*time.Minute, func() string { return fmt.Sprintf("%d acknowledged publishes (have %d)", killAfter, okCount.Load()) })
	mark := events.mark()
	fb.kill(t)
	okAtKill := okCount.Load()
	// (A publish may fail during the outage, or, where Publish waits for the
	// connection within its context, wait until the restart: either is
	// fine; what counts is what ends up on the queue.)
	events.wait(t, mark, artemis.EventDisconnected, "", faultWait)
	fb.restart(t)
	l.Mark(ledger.Publish) // resume: from the broker's restart to the next acknowledged publish
	events.wait(t, mark, artemis.EventReconnected, "", faultWait)
	waitClosed(t, workersDone, 4*time.Minute, func() string { return fmt.Sprintf("all publishes (have %d of %d)", okCount.Load(), total) })
	elapsed := time.Since(start)
	close(fatal)
	for err := range fatal {
		require.NoError(t, err)
	}
	require.NoError(t, pub.Close(ctx))
	stored := faultRecordStoredAndLeft(t, fb.Broker, l, q)

	mu.Lock()
	defer mu.Unlock()
	var missing, duplicated, foreign int
	seqs := map[int]int{}
	for id, seq := range acked {
		n := stored.copies[id]
		if n == 0 {
			missing++
		}
		if n > 1 {
			duplicated += n - 1
		}
		seqs[seq] += n
	}
	for id := range stored.copies {
		if _, ok := acked[id]; !ok {
			foreign++
		}
	}
	var retriedStoredOnce, ambiguousStoredOnce int
	for id := range retried {
		if stored.copies[id] == 1 {
			retriedStoredOnce++
		}
	}
	for id := range ambiguous {
		if stored.copies[id] == 1 {
			ambiguousStoredOnce++
		}
	}
	errTotal := ledger.Total(failures)

	t.Logf("FIGURES publisher: publishes acknowledged=%d (at kill %d) on queue=%d (unique %d) missing=%d duplicated=%d foreign=%d in %v",
		len(acked), okAtKill, stored.total, len(stored.copies), missing, duplicated, foreign, elapsed.Round(time.Millisecond))
	t.Logf("FIGURES publisher: publishes that returned an error=%d %v; messages resent after an error=%d (stored once: %d), "+
		"with an unknown outcome=%d (stored once: %d)",
		errTotal, failures, len(retried), retriedStoredOnce, len(ambiguous), ambiguousStoredOnce)
	t.Logf("FIGURES publisher: library retries (EventPublishRetried)=%d; events after the kill: %s",
		events.count(mark, artemis.EventPublishRetried), events.summary(mark))
	for kind, s := range samples {
		t.Logf("  %s, e.g. %s", kind, s)
	}
	faultReport(t, l, "broker SIGKILLed under a publisher",
		fmt.Sprintf("%d publishes in %.1f s", total, elapsed.Seconds()),
		fmt.Sprintf("publish errors %d %v (each sent again with the same envelope)", errTotal, failures))

	assert.Len(t, acked, total, "every message was acknowledged in the end")
	assert.Zero(t, missing, "acknowledged publishes missing from the queue")
	assert.Zero(t, duplicated, "copies beyond one per meta.id (duplicate detection)")
	assert.Zero(t, foreign, "messages on the queue that no publish acknowledged")
	assert.Len(t, seqs, total, "every sequence number is on the queue")
	for seq, n := range seqs {
		if n != 1 {
			t.Errorf("seq %d stored %d times", seq, n)
		}
	}
	assert.Equal(t, len(retried), retriedStoredOnce, "messages resent after an error are stored once")
	assert.Zero(t, failures["other"], "publish errors other than ErrOutcomeUnknown, ErrConnect, ErrNotAccepted or a deadline")
}
