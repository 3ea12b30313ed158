package artemis

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The options only Client.Consume and Subscribe read land in the
// Consumer's run options, and the defaults are the zero values Consume
// reads as "none" (credit 0: defaultCredit).
func TestConsumeOptionsSetTheRunOptions(t *testing.T) {
	h := Handlers{urnCreated: newHandled().handler(nil)}
	plain, err := NewConsumer(h)
	require.NoError(t, err)
	assert.Equal(t, consumeOptions{}, plain.run, "no option: the defaults")

	c, err := NewConsumer(h, WithCredit(7), WithoutDeadLetter(), WithMaxMessages(3),
		WithStopWhenIdle(2*time.Second), WithSelector("region = 'eu'"), WithOnlyHandledURNs(), WithNonDurable())
	require.NoError(t, err)
	assert.Equal(t, consumeOptions{
		credit:       7,
		selector:     "region = 'eu'",
		onlyHandled:  true,
		noDeadLetter: true,
		maxMessages:  3,
		stopWhenIdle: 2 * time.Second,
		nonDurable:   true,
	}, c.run)
	assert.Equal(t, consumeOptions{}, plain.run, "another Consumer's options are its own")
}

// WithCreditBytes sets the link's byte budget; without it the budget is
// DefaultCreditBytes; a budget below one byte is refused.
func TestWithCreditBytes(t *testing.T) {
	h := Handlers{urnCreated: newHandled().handler(nil)}
	plain, err := NewConsumer(h)
	require.NoError(t, err)
	assert.Equal(t, int64(DefaultCreditBytes), plain.run.creditBudget())
	c, err := NewConsumer(h, WithCreditBytes(4<<20))
	require.NoError(t, err)
	assert.Equal(t, int64(4<<20), c.run.creditBudget())
	for _, n := range []int64{0, -1} {
		_, err := NewConsumer(h, WithCreditBytes(n))
		assert.ErrorIs(t, err, ErrInvalidConfig, "credit bytes %d", n)
	}
}

// The Client's consume loop grants the link its credit within the budget
// WithCreditBytes sets: a budget smaller than one message lets one
// delivery at a time come, where the count credit alone would open the
// window to 100.
func TestConsumeGrantsCreditWithinWithCreditBytes(t *testing.T) {
	h, attached := liveHarness(t)
	require.NoError(t, h.dial())
	seen := newHandled()
	cons := mustConsumer(t, Handlers{urnCreated: seen.handler(nil)}, WithCreditBytes(1))
	run := startConsume(h, "orders", cons)
	r := attachedReceiver(t, attached)
	for range 3 {
		r.Push(orderMessage(t, 0))
		require.NoError(t, r.WaitSettled(context.Background(), 1))
	}
	for i, g := range r.Grants() {
		assert.Equal(t, uint32(1), g, "grant %d: one delivery at a time", i)
	}
	run.cancel()
	require.NoError(t, run.wait(t))
	// The first grant, then one for each settlement: a window that missed
	// a settlement would have stopped granting.
	assert.Equal(t, []uint32{1, 1, 1, 1}, r.Grants())
}
