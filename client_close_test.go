package artemis

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCloseCutsADialInFlightShort(t *testing.T) {
	dialing := make(chan struct{}, 4)
	h := newHarness(t, []string{"amqp://live:5672"}, &ClientOptions{DialTimeout: time.Minute}, func(fb *fakeBroker) {
		fb.block = func(ctx context.Context, _ *broker) error {
			if fb.connCount() > 0 {
				dialing <- struct{}{}
				<-ctx.Done() // a host that never answers, for a minute
				return ctx.Err()
			}
			return nil
		}
	})
	joined := make(chan struct{}, 4)
	h.c.joined = func() { joined <- struct{}{} }
	require.NoError(t, h.dial())
	p, err := h.c.Publisher(context.Background(), "orders")
	require.NoError(t, err)
	run := startConsume(h, "orders", mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}), nil)
	h.ev.wait(t, EventConsumerAttached)

	h.fb.conn(0).kill(&amqp.ConnError{})
	published := make(chan error, 1)
	go func() {
		_, err := p.Publish(context.Background(), urnCreated, orderData)
		published <- err
	}()
	select {
	case <-dialing:
	case <-time.After(5 * time.Second):
		t.Fatal("no re-dial started")
	}
	select {
	case <-joined: // the consumer and the publisher both wait on the one dial
	case <-time.After(5 * time.Second):
		t.Fatal("the dial was not shared")
	}

	start := time.Now()
	require.NoError(t, h.c.Close())
	assert.Less(t, time.Since(start), time.Second, "Close waits for no dial")
	assert.ErrorIs(t, run.wait(t), ErrClosed, "Consume returns ErrClosed")
	select {
	case err := <-published:
		assert.ErrorIs(t, err, ErrClosed)
		assert.ErrorIs(t, err, ErrConnect)
	case <-time.After(5 * time.Second):
		t.Fatal("the publish waiting on the dial outlived Close")
	}
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.Len(t, h.fb.dialed(), 2, "one shared re-dial, cut short")
}
