package artemis

import (
	"errors"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// creditBroker plays the broker's side of a manual-credit link: it sends a
// delivery for each credit granted, as long as it has messages.
type creditBroker struct {
	credit, flows int
	size          int
	inMemory      int64 // bytes held by the process: delivered, not settled
	peak          int64
	peakCount     int
	held          []*amqp.Message
}

func (b *creditBroker) issue(n uint32) error {
	b.credit += int(n)
	b.flows++
	return nil
}

// push delivers up to n messages on the credit there is.
func (b *creditBroker) push(w *creditWindow, n int) {
	for ; n > 0 && b.credit > 0; n-- {
		b.credit--
		msg := &amqp.Message{Data: [][]byte{make([]byte, b.size)}}
		b.held = append(b.held, msg)
		b.inMemory += deliverySize(msg)
		b.peak = max(b.peak, b.inMemory)
		b.peakCount = max(b.peakCount, len(b.held))
		w.received(msg)
	}
}

// settle settles the oldest n held deliveries.
func (b *creditBroker) settle(w *creditWindow, n int) {
	for ; n > 0 && len(b.held) > 0; n-- {
		msg := b.held[0]
		b.held = b.held[1:]
		b.inMemory -= deliverySize(msg)
		w.settled(msg)
	}
}

func TestCreditWindowSmallMessagesUseTheCountCredit(t *testing.T) {
	b := &creditBroker{size: 1024}
	w := newCreditWindow(b.issue, 100, DefaultCreditBytes)
	require.NoError(t, w.start())
	assert.Equal(t, 1, b.credit, "the first grant is one delivery")
	b.push(w, 1)
	assert.Equal(t, 99, b.credit, "its size opens the window to the count credit")
	b.push(w, 1000)
	assert.Equal(t, 100, b.peakCount)
	flowsBefore := b.flows
	for range 100 {
		b.settle(w, 10)
		b.push(w, 1000)
	}
	assert.Equal(t, 100, b.peakCount, "never more than the count credit held or in flight")
	// 1,000 settlements re-granted in batches of a quarter of the window.
	assert.LessOrEqual(t, b.flows-flowsBefore, 1000/25+1)
	assert.Greater(t, b.flows-flowsBefore, 0)
}

func TestCreditWindowLargeMessagesStayWithinTheBudget(t *testing.T) {
	const size, budget = 1 << 20, 8 << 20
	b := &creditBroker{size: size}
	w := newCreditWindow(b.issue, 100, budget)
	require.NoError(t, w.start())
	b.push(w, 1000)
	for range 200 {
		b.settle(w, 3)
		b.push(w, 1000)
	}
	t.Logf("1 MiB messages, budget 8 MiB, count 100: at most %d held, %d bytes", b.peakCount, b.peak)
	assert.LessOrEqual(t, b.peak, int64(budget), "the bytes held stay within the budget")
	assert.GreaterOrEqual(t, b.peakCount, 6, "the budget is used, not one at a time")
}

func TestCreditWindowAMessageOverTheBudgetStillFlows(t *testing.T) {
	b := &creditBroker{size: 4 << 20}
	w := newCreditWindow(b.issue, 100, 1<<20)
	require.NoError(t, w.start())
	for range 20 {
		b.push(w, 10)
		require.Len(t, b.held, 1, "one at a time")
		b.settle(w, 1)
	}
	assert.Equal(t, 1, b.peakCount)
	b.push(w, 10)
	assert.Len(t, b.held, 1, "the next one still comes: the window never closes")
}

func TestCreditWindowNoStallWhenEveryCreditIsHeld(t *testing.T) {
	b := &creditBroker{size: 100}
	w := newCreditWindow(b.issue, 4, DefaultCreditBytes)
	require.NoError(t, w.start())
	b.push(w, 100)
	require.Len(t, b.held, 4)
	assert.Zero(t, b.credit, "all four held: no credit")
	b.settle(w, 1)
	assert.Equal(t, 1, b.credit, "a quarter of a window of 4 is one: granted again at once")
}

func TestCreditWindowKeepsTheLinkError(t *testing.T) {
	gone := errors.New("link detached")
	calls := 0
	w := newCreditWindow(func(uint32) error { calls++; return gone }, 10, DefaultCreditBytes)
	require.ErrorIs(t, w.start(), gone)
	w.settled(&amqp.Message{})
	w.received(&amqp.Message{})
	assert.Equal(t, 1, calls, "no grant after the link failed")
}

func TestDeliverySizeCountsTheBody(t *testing.T) {
	assert.Equal(t, int64(deliveryOverhead), deliverySize(nil))
	assert.Equal(t, int64(deliveryOverhead+7), deliverySize(&amqp.Message{Data: [][]byte{[]byte("abc"), []byte("defg")}}))
	assert.Equal(t, int64(deliveryOverhead+2), deliverySize(&amqp.Message{Value: "hi"}))
}
