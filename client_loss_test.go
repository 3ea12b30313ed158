package artemis

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// blackHoleFirst makes every transfer on connections to the live URL hang
// until its context ends, as over a half-open network that still carries
// heartbeats; the backup answers.
func blackHoleFirst(fb *fakeBroker) {
	fb.setup = func(c *fakeConn) {
		if strings.Contains(c.addr, "live") {
			c.outcome = fakelink.Hang
		}
	}
}

func TestOutcomeTimeoutsDeclareTheConnectionDead(t *testing.T) {
	h, p := newPublisherHarness(t, blackHoleFirst)
	h.b.minOutcomeWait = 10 * time.Millisecond
	for i := range DefaultOutcomeTimeouts {
		// Long enough past minOutcomeWait that a publish scheduled late on
		// a loaded machine still waits that long for its outcome: a shorter
		// wait is not counted, by design (TestShortContextsDoNotCountAsOutcomeTimeouts).
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		_, err := p.Publish(ctx, Job(urnCreated, orderData))
		cancel()
		require.Error(t, err, "publish %d", i)
		assert.ErrorIs(t, err, ErrOutcomeUnknown)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	}
	lost := h.ev.wait(t, EventDisconnected)
	assert.Equal(t, "amqp://live:5672", lost.URL)
	assert.Contains(t, lost.Err.Error(), "no outcome")

	id, err := p.Publish(context.Background(), Job(urnCreated, orderData))
	require.NoError(t, err, "the backup takes over")
	kept := h.keptOn("orders")
	require.Len(t, kept, 1)
	assert.Equal(t, id, kept[0].Properties.MessageID)
	assert.Equal(t, []string{"amqp://live:5672", "amqp://backup:5672"}, h.fb.dialed())
	assert.Eventually(t, h.fb.conn(0).dead, 5*time.Second, time.Millisecond, "the dead connection is closed")
}

// An outcome in between, of a Publish or of a receipt, resets the count of
// outcome timeouts.
func TestAnOutcomeResetsTheTimeoutCount(t *testing.T) {
	answers := map[string]func(t *testing.T, p *ClientPublisher){
		"publish": func(t *testing.T, p *ClientPublisher) {
			_, err := p.Publish(context.Background(), Job(urnCreated, orderData))
			require.NoError(t, err)
		},
		"receipt": func(t *testing.T, p *ClientPublisher) {
			r, err := p.PublishWithReceipt(context.Background(), Job(urnCreated, orderData))
			require.NoError(t, err)
			require.NoError(t, r.Wait(context.Background()))
		},
	}
	for name, answer := range answers {
		t.Run(name, func(t *testing.T) {
			var hang atomic.Bool
			h, p := newPublisherHarness(t, func(fb *fakeBroker) {
				fb.setup = func(c *fakeConn) {
					c.outcome = func(ctx context.Context, m *amqp.Message) (amqp.DeliveryState, error) {
						if hang.Load() {
							return fakelink.Hang(ctx, m)
						}
						return fakelink.Accept(ctx, m)
					}
				}
			})
			h.b.minOutcomeWait = 0
			timeOut := func(n int) {
				hang.Store(true)
				for range n {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
					_, err := p.Publish(ctx, Job(urnCreated, orderData))
					cancel()
					require.ErrorIs(t, err, ErrOutcomeUnknown)
				}
				hang.Store(false)
			}
			for range 3 {
				timeOut(DefaultOutcomeTimeouts - 1)
				answer(t, p)
			}
			assert.Equal(t, 1, h.fb.connCount(), "timeouts with outcomes in between never add up")
			assert.False(t, h.fb.conn(0).dead())
		})
	}
}

func TestOutcomeTimeoutsCanBeIgnored(t *testing.T) {
	h := newHarness(t, []string{"amqp://live:5672", "amqp://backup:5672"}, &ClientOptions{OutcomeTimeouts: -1}, blackHoleFirst)
	require.NoError(t, h.dial())
	h.b.minOutcomeWait = 0
	p, err := h.c.Publisher(context.Background(), "orders")
	require.NoError(t, err)
	for range 2 * DefaultOutcomeTimeouts {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		_, err := p.Publish(ctx, Job(urnCreated, orderData))
		cancel()
		require.ErrorIs(t, err, ErrOutcomeUnknown)
	}
	assert.Equal(t, 1, h.fb.connCount())
	assert.False(t, h.fb.conn(0).dead())
}

func TestShortContextsDoNotCountAsOutcomeTimeouts(t *testing.T) {
	h, p := newPublisherHarness(t, blackHoleFirst)
	assert.Equal(t, minOutcomeWait, h.b.minOutcomeWait, "the default")
	for range 2 * DefaultOutcomeTimeouts {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		_, err := p.Publish(ctx, Job(urnCreated, orderData))
		cancel()
		require.ErrorIs(t, err, ErrOutcomeUnknown)
	}
	assert.Equal(t, 1, h.fb.connCount(), "a 5 ms context says nothing about the connection")
	assert.False(t, h.fb.conn(0).dead())
}
