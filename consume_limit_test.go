package artemis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chanReceiver hands out the messages sent on ch.
type chanReceiver struct {
	Receiver
	ch    chan *amqp.Message
	calls int
}

func (r *chanReceiver) Receive(ctx context.Context, _ *amqp.ReceiveOptions) (*amqp.Message, error) {
	r.calls++
	select {
	case m := <-r.ch:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func TestConsumeLimitMax(t *testing.T) {
	ctx, end := context.WithCancel(context.Background())
	defer end()
	b := newConsumeLimit(2, 0, end)
	w := b.join()
	r := &chanReceiver{ch: make(chan *amqp.Message, 3)}
	for range 3 {
		r.ch <- &amqp.Message{}
	}
	for i := range 2 {
		m, err := w.receive(ctx, r)
		require.NoError(t, err)
		require.NotNil(t, m, "delivery %d", i)
	}
	m, err := w.receive(ctx, r)
	assert.Nil(t, m)
	assert.NoError(t, err)
	assert.Equal(t, 2, r.calls, "no receive once the limit is spent: the third stays with the link")
	assert.Len(t, r.ch, 1)
	w.leave(ctx) // ends the Consume's context and returns
	assert.Error(t, ctx.Err())
}

func TestConsumeLimitReceiveErrorGivesTheReservationBack(t *testing.T) {
	ctx, end := context.WithCancel(context.Background())
	defer end()
	b := newConsumeLimit(1, 0, end)
	w := b.join()
	rctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err := w.receive(rctx, &chanReceiver{ch: make(chan *amqp.Message)})
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, int64(0), b.taken.Load())
	w.leave(ctx) // not at the limit: the Consume loop decides
	assert.NoError(t, ctx.Err())
}

func TestConsumeLimitIdle(t *testing.T) {
	ctx, end := context.WithCancel(context.Background())
	defer end()
	b := newConsumeLimit(0, 20*time.Millisecond, end)
	a, c := b.join(), b.join() // two members of a cluster
	r := &chanReceiver{ch: make(chan *amqp.Message)}
	m, err := a.receive(ctx, r)
	assert.Nil(t, m)
	assert.NoError(t, err)
	left := make(chan struct{})
	go func() { a.leave(ctx); close(left) }()
	select {
	case <-left:
		t.Fatal("the first idle member ended the Consume while the other still receives")
	case <-time.After(50 * time.Millisecond):
	}
	assert.NoError(t, ctx.Err())
	m, err = c.receive(ctx, r)
	assert.Nil(t, m)
	assert.NoError(t, err)
	c.leave(ctx)
	<-left
	assert.Error(t, ctx.Err())
}

func TestConsumeLimitNilIsAPlainReceive(t *testing.T) {
	var w *limitListen
	r := &chanReceiver{ch: make(chan *amqp.Message, 1)}
	r.ch <- &amqp.Message{}
	m, err := w.receive(context.Background(), r)
	assert.NotNil(t, m)
	assert.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = w.receive(ctx, r)
	assert.True(t, errors.Is(err, context.Canceled))
}
