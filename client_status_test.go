package artemis

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStatusFollowsTheConnection(t *testing.T) {
	clk := newStepClock()
	live := "amqp://babel:" + secret + "@live.example:5672"
	backup := "amqp://babel:" + secret + "@backup.example:5672"
	h := newHarness(t, []string{live, backup}, nil, func(fb *fakeBroker) {
		fb.dialErr = func(n int, b *broker) error {
			if n == 1 && strings.Contains(b.addr, "live") {
				return refused
			}
			return nil
		}
	})
	h.b.now = clk.now

	assert.Equal(t, ClientStatus{}, h.c.Status(), "nothing before the first dial")

	t0 := clk.now()
	require.NoError(t, h.dial())
	s := h.c.Status()
	assert.True(t, s.Connected)
	assert.Equal(t, "amqp://babel:xxxxx@backup.example:5672", s.URL)
	assert.ErrorIs(t, s.LastError, refused, "the live URL's refusal is the last error")
	assert.NotContains(t, s.LastError.Error(), secret)
	assert.Equal(t, t0, s.Since)

	// A connection that died is not connected, even before the loss is
	// reported.
	clk.advance(time.Minute)
	h.fb.conn(0).kill(&amqp.ConnError{})
	assert.False(t, h.c.Status().Connected)

	// Noticed and re-dialed (the next URL after the lost one: live).
	clk.advance(time.Minute)
	_, err := h.b.connection(context.Background())
	require.NoError(t, err)
	h.ev.wait(t, EventReconnected)
	s = h.c.Status()
	assert.True(t, s.Connected)
	assert.Equal(t, "amqp://babel:xxxxx@live.example:5672", s.URL)
	var ce *amqp.ConnError
	assert.ErrorAs(t, s.LastError, &ce, "the loss is kept as the reason for the last outage")
	assert.Equal(t, t0.Add(2*time.Minute), s.Since, "connected again since the re-dial")

	require.NoError(t, h.c.Close(context.Background()))
	s = h.c.Status()
	assert.False(t, s.Connected)
	assert.ErrorIs(t, s.LastError, ErrClosed)
}

func TestStatusWhileNoURLAnswers(t *testing.T) {
	clk := newStepClock()
	h := newHarness(t, []string{"amqp://babel:" + secret + "@a.example"}, nil, func(fb *fakeBroker) {
		fb.dialErr = func(int, *broker) error { return refused }
	})
	h.b.now = clk.now
	require.Error(t, h.dial())
	s := h.c.Status()
	assert.False(t, s.Connected)
	assert.Empty(t, s.URL, "never connected")
	assert.ErrorIs(t, s.LastError, refused)
	assert.NotContains(t, s.LastError.Error(), secret)
	assert.Equal(t, clk.now(), s.Since, "without a connection since the first failed dial")
}

func TestStatusIsSafeForConcurrentProbes(t *testing.T) {
	h := newHarness(t, []string{"amqp://live:5672"}, nil, nil)
	require.NoError(t, h.dial())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 200 {
			_ = h.c.Status()
		}
	}()
	for range 20 {
		h.fb.conn(h.fb.connCount() - 1).kill(nil)
		_, err := h.b.connection(context.Background())
		require.NoError(t, err)
	}
	<-done
	assert.True(t, h.c.Status().Connected)
}

// TestStatusStaysConnectedWhenALossIsReportedLate: the goroutine that
// noticed a loss may run late, after the re-dial it allowed has connected
// again. The loss is tracked with the connection's change, so the late
// report never turns a connected Client into a disconnected one (a
// readiness probe would then fail until the next loss).
func TestStatusStaysConnectedWhenALossIsReportedLate(t *testing.T) {
	h := newHarness(t, []string{"amqp://live.example:5672"}, nil, nil)
	require.NoError(t, h.dial())
	h.ev.wait(t, EventConnected)

	// The next reading of the clock, the loss's, stalls until released.
	stalled, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h.b.now = func() time.Time {
		first := false
		once.Do(func() { first = true })
		if first {
			close(stalled)
			<-release
		}
		return time.Now()
	}
	h.fb.conn(0).kill(&amqp.ConnError{})
	select {
	case <-stalled:
	case <-time.After(5 * time.Second):
		t.Fatal("the loss was never tracked")
	}

	redialled := make(chan error, 1)
	go func() {
		_, err := h.b.connection(context.Background())
		redialled <- err
	}()
	early := false // the re-dial ended while the loss was still untracked
	select {
	case err := <-redialled:
		require.NoError(t, err)
		early = true
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if !early {
		select {
		case err := <-redialled:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("the re-dial did not end")
		}
	}
	// Both reported, in whichever order their goroutines ran.
	require.Eventually(t, func() bool {
		var lost, back bool
		for _, ev := range h.ev.list() {
			lost = lost || ev.Kind == EventDisconnected
			back = back || ev.Kind == EventReconnected
		}
		return lost && back
	}, 5*time.Second, time.Millisecond, "the loss and the reconnection reported")
	s := h.c.Status()
	assert.True(t, s.Connected, "connected again: a loss reported after its re-dial must not say otherwise (%+v)", s)
}
