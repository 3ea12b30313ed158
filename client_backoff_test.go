package artemis

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

func TestConsumeBackoffResetsOnceAMessageWasHandled(t *testing.T) {
	cases := []struct {
		name    string
		deliver bool
		want    []time.Duration
	}{
		{"each attachment handles a message: the first wait every time", true, []time.Duration{100, 100, 100, 100, 100}},
		{"no message gets through: the wait grows", false, []time.Duration{100, 200, 400, 800, 1600}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, []string{"amqp://live:5672"},
				&ClientOptions{Backoff: &Backoff{Initial: 100 * time.Millisecond, Max: 30 * time.Second, Multiplier: 2}},
				func(fb *fakeBroker) {
					fb.setup = func(c *fakeConn) {
						if tc.deliver {
							c.deliveries = func() []*amqp.Message { return []*amqp.Message{orderMessage(t, 0)} }
						}
						c.attached = make(chan *fakelink.Receiver, 64)
						go func() {
							for r := range c.attached {
								go func() {
									if tc.deliver {
										// Handled and settled, then the link drops.
										_ = r.WaitSettled(context.Background(), 1)
									}
									r.Fail(&amqp.LinkError{})
								}()
							}
						}()
					}
				})
			require.NoError(t, h.dial())
			run := startConsume(h, "orders", mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}), nil)
			for i, w := range tc.want {
				assert.Equal(t, w*time.Millisecond, h.timers.next(t), "wait %d", i+1)
			}
			run.cancel()
			require.NoError(t, run.wait(t))
			close(h.fb.conn(0).attached)
		})
	}
}

func TestConsumeBackoffEndsWhenAPublisherRedialled(t *testing.T) {
	attached := make(chan *fakelink.Receiver, 8)
	h := newHarness(t, []string{"amqp://live:5672", "amqp://backup:5672"}, nil, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) { c.attached = attached }
	})
	h.timers.hold = true // the consumer's backoff would never end by itself
	require.NoError(t, h.dial())
	p, err := h.c.Publisher(context.Background(), "orders")
	require.NoError(t, err)
	run := startConsume(h, "orders", mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}), nil)
	attachedReceiver(t, attached)
	h.ev.wait(t, EventConsumerAttached)

	h.fb.conn(0).kill(&amqp.ConnError{})
	h.ev.wait(t, EventConsumerLost)
	assert.Equal(t, 90*time.Millisecond, h.timers.next(t), "the consumer waits its backoff")

	// A publish re-dials meanwhile: the consumer's wait is over.
	_, err = p.Publish(context.Background(), urnCreated, orderData)
	require.NoError(t, err)
	r := attachedReceiver(t, attached)
	assert.Equal(t, "orders", r.Address())
	resumed := h.ev.wait(t, EventConsumerResumed)
	assert.Equal(t, "amqp://backup:5672", resumed.URL)
	assert.Equal(t, 2, h.fb.connCount(), "the consumer used the publisher's connection")

	run.cancel()
	require.NoError(t, run.wait(t))
}

func TestConsumeDoesNotWaitForAConnectionAlreadyBack(t *testing.T) {
	attached := make(chan *fakelink.Receiver, 8)
	h := newHarness(t, []string{"amqp://live:5672", "amqp://backup:5672"}, nil, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) { c.attached = attached }
	})
	h.timers.hold = true
	require.NoError(t, h.dial())
	run := startConsume(h, "orders", mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}), nil)
	r1 := attachedReceiver(t, attached)
	h.ev.wait(t, EventConsumerAttached)

	// The connection dies (its links are not told) and is re-dialled by
	// another user of the Client; then the receiver fails. Listen hears of
	// the loss at once through the connection's lost context, so the
	// consumer may have started its backoff before the re-dial: the timers
	// are held, so it can only resume if that wait ends with the re-dial.
	cn0 := h.fb.conn(0)
	cn0.once.Do(func() { cn0.err = &amqp.ConnError{}; close(cn0.done) }) // its links not told yet
	h.ev.wait(t, EventDisconnected)
	_, err := h.c.connection(context.Background())
	require.NoError(t, err)
	r1.Fail(&amqp.ConnError{})

	attachedReceiver(t, attached)
	resumed := h.ev.wait(t, EventConsumerResumed)
	assert.Equal(t, "amqp://backup:5672", resumed.URL, "the consumer took the connection that was back")
	assert.Equal(t, 2, h.fb.connCount(), "the consumer dialled nothing of its own")
	run.cancel()
	require.NoError(t, run.wait(t))
}
