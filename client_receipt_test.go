package artemis

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// receiptConn is a fakeConn whose senders pipeline, as go-amqp's do: a
// transfer is written at once and its outcome comes later, given by the
// test, or fails when the connection dies.
type receiptConn struct{ *fakeConn }

func (c receiptConn) NewSession(context.Context, *amqp.SessionOptions) (amqpSession, error) {
	return c, nil
}

func (c receiptConn) NewSender(ctx context.Context, target string, opts *amqp.SenderOptions) (linkSender, error) {
	ls, err := c.fakeConn.NewSender(ctx, target, opts)
	if err != nil {
		return nil, err
	}
	return &receiptLink{Sender: ls.(*fakelink.Sender), conn: c.fakeConn, outcomes: receiptOutcomes(c.fakeConn)}, nil
}

// The outcomes the test gives, by connection and message-id; a message
// sent twice (a retry) waits on the same channel again.
var (
	outcomesMu sync.Mutex
	outcomesOf = map[*fakeConn]*outcomeBook{}
)

type outcomeBook struct {
	mu      sync.Mutex
	written []string
	ch      map[string]chan outcomeOf
}

func receiptOutcomes(c *fakeConn) *outcomeBook {
	outcomesMu.Lock()
	defer outcomesMu.Unlock()
	b, ok := outcomesOf[c]
	if !ok {
		b = &outcomeBook{ch: map[string]chan outcomeOf{}}
		outcomesOf[c] = b
	}
	return b
}

func (b *outcomeBook) channel(id string) chan outcomeOf {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch, ok := b.ch[id]
	if !ok {
		ch = make(chan outcomeOf, 1)
		b.ch[id] = ch
	}
	return ch
}

func (b *outcomeBook) ids() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.written...)
}

type receiptLink struct {
	*fakelink.Sender
	conn     *fakeConn
	outcomes *outcomeBook
}

func (l *receiptLink) startOutcome(_ context.Context, msg *amqp.Message) (pendingTransfer, error) {
	if l.conn.dead() {
		return pendingTransfer{}, &amqp.ConnError{}
	}
	id := msg.Properties.MessageID.(string)
	l.outcomes.mu.Lock()
	l.outcomes.written = append(l.outcomes.written, id)
	l.outcomes.mu.Unlock()
	ch := l.outcomes.channel(id)
	done := l.conn.done
	return pendingTransfer{later: func(ctx context.Context) (amqp.DeliveryState, error) {
		select {
		case o := <-ch:
			return o.state, o.err
		case <-done:
			return nil, &amqp.ConnError{}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}, nil
}

// receiptHarness is newHarness with pipelining links.
func receiptHarness(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t, []string{"amqp://live:5672"}, nil, nil)
	c, err := newClient([]string{"amqp://live:5672"}, &ClientOptions{OnEvent: h.ev.on}, func(ctx context.Context, b *broker) (amqpConn, error) {
		cn, err := h.fb.dial(ctx, b)
		if err != nil {
			return nil, err
		}
		return receiptConn{cn.(*fakeConn)}, nil
	})
	require.NoError(t, err)
	c.random = func() float64 { return 0.5 }
	c.after = h.timers.after
	t.Cleanup(func() { _ = c.Close() })
	h.c = c
	return h
}

func TestClientPublisherReceiptsPipeline(t *testing.T) {
	h := receiptHarness(t)
	pub, err := h.c.Publisher(context.Background(), "orders")
	require.NoError(t, err)
	book := receiptOutcomes(h.fb.conn(0))
	var rs []*Receipt
	for range 5 {
		r, err := pub.PublishWithReceipt(context.Background(), urnCreated, nil, WithTTL(1000), WithGroupID("g"))
		require.NoError(t, err)
		rs = append(rs, r)
	}
	require.Len(t, book.ids(), 5, "all five written before any outcome")
	for i := len(rs) - 1; i >= 0; i-- {
		if i == 2 {
			book.channel(rs[i].ID()) <- outcomeOf{state: &amqp.StateRejected{}}
			continue
		}
		book.channel(rs[i].ID()) <- outcomeOf{state: &amqp.StateAccepted{}}
	}
	for i, r := range rs {
		if i == 2 {
			assert.ErrorIs(t, r.Wait(context.Background()), ErrNotAccepted)
			continue
		}
		assert.NoError(t, r.Wait(context.Background()))
	}
}

// Receipts outstanding when the connection drops: unknown without
// duplicate detection, nothing resent.
func TestClientPublisherReceiptsOfALostConnectionAreUnknown(t *testing.T) {
	h := receiptHarness(t)
	pub, err := h.c.Publisher(context.Background(), "orders")
	require.NoError(t, err)
	var rs []*Receipt
	for range 3 {
		r, err := pub.PublishWithReceipt(context.Background(), urnCreated, nil)
		require.NoError(t, err)
		rs = append(rs, r)
	}
	h.fb.conn(0).kill(&amqp.ConnError{})
	for _, r := range rs {
		err := r.Wait(context.Background())
		require.ErrorIs(t, err, ErrOutcomeUnknown)
		assert.NotErrorIs(t, err, ErrNotAccepted)
	}
	assert.Equal(t, 1, h.fb.connCount(), "nothing re-dialed: nothing to resend")
	assert.NotContains(t, h.ev.kinds(), EventPublishRetried)

	// The next publish re-dials.
	r, err := pub.PublishWithReceipt(context.Background(), urnCreated, nil)
	require.NoError(t, err)
	receiptOutcomes(h.fb.conn(1)).channel(r.ID()) <- outcomeOf{state: &amqp.StateAccepted{}}
	require.NoError(t, r.Wait(context.Background()))
}

// With WithDuplicateDetection, each outstanding receipt's message is sent
// once more on the re-dialed link, and the receipt resolves with that
// outcome; a resend lost too is unknown.
func TestClientPublisherReceiptsAreResentOnceWithDuplicateDetection(t *testing.T) {
	h := receiptHarness(t)
	var answers sync.Map // meta.id -> the resend's outcome
	h.fb.setup = func(c *fakeConn) {
		c.outcome = func(_ context.Context, m *amqp.Message) (amqp.DeliveryState, error) {
			a, ok := answers.Load(m.Properties.MessageID)
			if !ok {
				return nil, errors.New("unexpected resend")
			}
			o := a.(outcomeOf)
			return o.state, o.err
		}
	}
	pub, err := h.c.Publisher(context.Background(), "orders", WithDuplicateDetection())
	require.NoError(t, err)
	var rs []*Receipt
	for range 3 {
		r, err := pub.PublishWithReceipt(context.Background(), urnCreated, nil)
		require.NoError(t, err)
		rs = append(rs, r)
	}
	answers.Store(rs[0].ID(), outcomeOf{state: &amqp.StateAccepted{}})
	answers.Store(rs[1].ID(), outcomeOf{state: &amqp.StateReleased{}})
	answers.Store(rs[2].ID(), outcomeOf{err: &amqp.ConnError{}})
	first := receiptOutcomes(h.fb.conn(0))
	h.fb.conn(0).kill(&amqp.ConnError{})

	require.NoError(t, rs[0].Wait(context.Background()), "the resend was accepted")
	assert.ErrorIs(t, rs[1].Wait(context.Background()), ErrNotAccepted, "the resend's own outcome")
	assert.ErrorIs(t, rs[2].Wait(context.Background()), ErrOutcomeUnknown, "a resend lost too")

	assert.Equal(t, []string{rs[0].ID(), rs[1].ID(), rs[2].ID()}, first.ids(), "written once on the first link")
	var resent []string
	for i := 1; i < h.fb.connCount(); i++ {
		for _, s := range h.fb.conn(i).sendersTo("orders") {
			for _, m := range s.Sent() {
				resent = append(resent, m.Properties.MessageID.(string))
				assert.Equal(t, m.Properties.MessageID, m.ApplicationProperties[PropDuplicateID], "the same duplicate id")
			}
		}
	}
	assert.Equal(t, []string{rs[0].ID(), rs[1].ID(), rs[2].ID()}, resent, "each resent once, in order")
	retried := 0
	for _, k := range h.ev.kinds() {
		if k == EventPublishRetried {
			retried++
		}
	}
	assert.Equal(t, 3, retried)
}
