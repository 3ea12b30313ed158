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

// publishSender attaches one reconnecting sender now, to the queue or the
// topic's multicast address, with the capability that says which.
func TestBrokerPublishSenderAttachesNow(t *testing.T) {
	h := newHarness(t, []string{"amqp://live:5672"}, nil, nil)
	require.NoError(t, h.dial())
	for _, tc := range []struct {
		addr  string
		topic bool
		cap   string
	}{
		{"orders", false, "queue"},
		{"orders.events", true, "topic"},
	} {
		link, err := h.b.publishSender(context.Background(), tc.addr, tc.topic)
		require.NoError(t, err)
		s, ok := link.(*clientSender)
		require.True(t, ok, "one broker's publisher sends through its reconnecting sender, got %T", link)
		assert.Equal(t, tc.addr, s.addr)
		assert.Equal(t, tc.topic, s.topic)
		require.NotNil(t, s.cur.Load(), "attached before the first publish")
		snd := h.fb.conn(0).sendersTo(tc.addr)
		require.Len(t, snd, 1)
		assert.Equal(t, []string{tc.cap}, snd[0].Options.TargetCapabilities)
		require.NoError(t, link.close(context.Background()))
	}
}

// Without a broker, publishSender waits for one within ctx; with FailFast
// it returns the dial round's failure at once.
func TestBrokerPublishSenderWaitsForTheBrokerUnlessFailFast(t *testing.T) {
	down := func(fb *fakeBroker) { fb.dialErr = func(int, *broker) error { return refused } }

	patient := newHarness(t, []string{"amqp://live:5672"}, nil, down)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := patient.b.publishSender(ctx, "orders", false)
	require.ErrorIs(t, err, ErrConnect)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "it waited until ctx ended")

	fast := newHarness(t, []string{"amqp://live:5672"}, &ClientOptions{FailFast: true}, down)
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = fast.b.publishSender(ctx, "orders", false)
	require.ErrorIs(t, err, ErrConnect)
	assert.False(t, errors.Is(err, context.DeadlineExceeded), "FailFast does not wait: %v", err)
	assert.Len(t, fast.fb.dialed(), 1, "one dial round over the one URL")
}

// up is true only while the member has a connection that is neither dead
// nor dropped: a dropped one whose close still hangs is not up.
func TestBrokerClientIsUpOnlyOnALiveConnection(t *testing.T) {
	h := newHarness(t, []string{"amqp://live:5672"}, nil, nil)
	assert.False(t, h.b.up(), "never dialled")
	require.NoError(t, h.dial())
	assert.True(t, h.b.up())
	h.fb.conn(0).kill(&amqp.ConnError{})
	assert.False(t, h.b.up(), "its connection died")
	require.NoError(t, h.dial())
	assert.True(t, h.b.up(), "re-dialled")

	slow := slowCloseHarness(t, nil)
	require.True(t, slow.b.up())
	slow.b.mu.Lock()
	cn := slow.b.cur
	slow.b.mu.Unlock()
	require.NotNil(t, cn)
	slow.b.drop(cn, errors.New("taken for dead"))
	assert.False(t, slow.b.up(), "dropped, its close still hanging")

	require.NoError(t, h.c.Close(context.Background()))
	assert.False(t, h.b.up(), "closed")
}
