package faults_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
)

// lineCounter counts log lines, each with the time it was written.
type lineCounter struct {
	mu    sync.Mutex
	times []time.Time
	last  bytes.Buffer
}

func (l *lineCounter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for range bytes.Count(p, []byte("\n")) {
		l.times = append(l.times, time.Now())
	}
	l.last.Reset()
	l.last.Write(p)
	return len(p), nil
}

func (l *lineCounter) between(from, to time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, t := range l.times {
		if !t.Before(from) && !t.After(to) {
			n++
		}
	}
	return n
}

// TestFaultPublishThroughAnOutage: 8 goroutines publish with the Client's
// default options while the broker is down for about 20 s (SIGKILL, 20 s,
// restart). Publishes wait for the connection instead of failing; the
// Client dials once per backoff step, and logs once per step.
func TestFaultPublishThroughAnOutage(t *testing.T) {
	fb := requireFaultBroker(t)
	const (
		workers = 8
		outage  = 20 * time.Second
	)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	q := faultQueue("outage")
	lines := &lineCounter{}
	var (
		evMu   sync.Mutex
		dialAt []time.Time // every dial attempt that ended: failed, connected or reconnected
		backAt time.Time
	)
	c, err := artemis.Dial(ctx, []string{fb.URL}, &artemis.ClientOptions{
		Logger: slog.New(slog.NewTextHandler(lines, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OnEvent: func(ev artemis.ConnectionEvent) {
			evMu.Lock()
			defer evMu.Unlock()
			switch ev.Kind {
			case artemis.EventDialFailed, artemis.EventConnected:
				dialAt = append(dialAt, time.Now())
			case artemis.EventReconnected:
				dialAt = append(dialAt, time.Now())
				if backAt.IsZero() {
					backAt = time.Now()
				}
			}
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	pub, err := c.Publisher(ctx, q, artemis.WithDuplicateDetection())
	require.NoError(t, err)

	var (
		ok, unknown, connect, other atomic.Int64
		stop                        = make(chan struct{})
		otherErr                    atomic.Value
		longest                     atomic.Int64
	)
	wait := testkit.PublishUntil(ctx, pub, workers, stop, 2*time.Minute, faultURN, faultData{Seq: 1}, func(_ string, err error, took time.Duration) {
		if d := int64(took); d > longest.Load() {
			longest.Store(d)
		}
		switch {
		case err == nil:
			ok.Add(1)
		case errors.Is(err, artemis.ErrOutcomeUnknown):
			unknown.Add(1) // in flight at the kill
		case errors.Is(err, artemis.ErrConnect):
			connect.Add(1)
		default:
			other.Add(1)
			otherErr.Store(err.Error())
		}
	})
	for ok.Load() < 500 {
		time.Sleep(10 * time.Millisecond)
	}
	okBefore := ok.Load()
	killedAt := time.Now()
	fb.kill(t)
	time.Sleep(outage) // the outage itself
	restartAt := time.Now()
	fb.restart(t)
	upAt := time.Now()
	deadline := time.After(2 * time.Minute)
	for ok.Load() < okBefore+500 {
		select {
		case <-deadline:
			t.Fatalf("publishing did not resume: %d ok since the kill", ok.Load()-okBefore)
		case <-time.After(10 * time.Millisecond):
		}
	}
	close(stop)
	wait()

	evMu.Lock()
	back := backAt
	dials := 0
	for _, at := range dialAt {
		if at.After(killedAt) && !at.After(back) {
			dials++
		}
	}
	evMu.Unlock()
	require.False(t, back.IsZero(), "the Client reconnected")
	down := back.Sub(killedAt)
	logLines := lines.between(killedAt, back)
	t.Logf("FIGURES outage: broker down %v (killed, %v, restart took %v), publishing again %v after the kill (%v after the broker was up)",
		upAt.Sub(killedAt).Round(time.Millisecond), outage, upAt.Sub(restartAt).Round(time.Millisecond),
		down.Round(time.Millisecond), back.Sub(upAt).Round(time.Millisecond))
	t.Logf("FIGURES outage: %d goroutines; during the outage %d dials (%.2f/s) and %d log lines (%.2f/s); publishes ok=%d (before the kill %d), ErrOutcomeUnknown=%d, ErrConnect=%d, other=%d; longest publish %v",
		workers, dials, float64(dials)/down.Seconds(), logLines, float64(logLines)/down.Seconds(),
		ok.Load(), okBefore, unknown.Load(), connect.Load(), other.Load(), time.Duration(longest.Load()).Round(time.Millisecond))
	if v := otherErr.Load(); v != nil {
		t.Logf("other error, e.g. %s", v)
	}
	assert.Zero(t, connect.Load(), "no publish fails for want of a connection: they wait")
	assert.Zero(t, other.Load())
	assert.LessOrEqual(t, unknown.Load(), int64(workers), "only the publishes in flight at the kill have an unknown outcome")
	assert.Less(t, float64(dials)/down.Seconds(), 1.0, "dials per backoff step, not per publish")
	assert.Less(t, float64(logLines)/down.Seconds(), 3.0, "log lines per backoff step, not per publish")
}
