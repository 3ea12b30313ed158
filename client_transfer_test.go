package artemis

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Whatever becomes of the resend after a lost outcome, the first copy may
// be stored: a resend that is never written (no credit on the new link
// until ctx ends) or that the broker refuses leaves the outcome unknown,
// never "not sent" or "not stored".
func TestPublisherResendThatFailsLeavesTheOutcomeUnknown(t *testing.T) {
	for _, tc := range []struct {
		name   string
		resend func(context.Context, *amqp.Message) (amqp.DeliveryState, error)
	}{
		{"never written", func(ctx context.Context, _ *amqp.Message) (amqp.DeliveryState, error) {
			<-ctx.Done()
			return nil, &amqp.Error{Condition: amqp.ErrCondTransferLimitExceeded, Description: "credit limit exceeded for sending link"}
		}},
		{"rejected", func(context.Context, *amqp.Message) (amqp.DeliveryState, error) {
			return &amqp.StateRejected{Error: &amqp.Error{Condition: "amqp:internal-error", Description: "no room"}}, nil
		}},
		{"released", func(context.Context, *amqp.Message) (amqp.DeliveryState, error) {
			return &amqp.StateReleased{}, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, p := newPublisherHarness(t, dropConnDuringSend(tc.resend), WithDuplicateDetection())
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err := p.Publish(ctx, Job(urnCreated, orderData))
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrOutcomeUnknown, "the first copy may be stored")
			assert.NotErrorIs(t, err, ErrNotAccepted, "not a publish the broker did not store")
			assert.False(t, neverSent(err), "not a publish that was never sent: %v", err)
			assert.Contains(t, err.Error(), "the resend", "what became of the resend")
			h.ev.wait(t, EventPublishRetried)
		})
	}
}

// cutConn is a fakeConn whose first sender is a cutLink (outcome_test.go),
// whose every transfer is cut by its context between two frames.
type cutConn struct {
	*fakeConn
	cut  linkSender // the first sender it attaches
	used atomic.Bool
}

func (c *cutConn) NewSession(context.Context, *amqp.SessionOptions) (amqpSession, error) {
	return c, nil
}

func (c *cutConn) NewSender(ctx context.Context, target string, opts *amqp.SenderOptions) (linkSender, error) {
	if c.used.CompareAndSwap(false, true) {
		return c.cut, nil
	}
	return c.fakeConn.NewSender(ctx, target, opts)
}

// A ClientPublisher's transfer cut by its context between two frames left
// an incomplete delivery on its link: the link is given up (detached) and
// the next publish goes out on a new one, on the same connection. The cut
// publish is reported as never sent, not as an unknown outcome.
func TestClientPublisherGivesUpALinkCutBetweenFrames(t *testing.T) {
	for name, publish := range publishWays {
		t.Run(name, func(t *testing.T) {
			cut := &cutLink{frames: 2}
			h := harnessOver(t, ClientOptions{}, func(c *fakeConn) amqpConn { return &cutConn{fakeConn: c, cut: cut} }, "amqp://live:5672")
			pub, err := h.c.Publisher(context.Background(), "orders")
			require.NoError(t, err)

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
			defer cancel()
			err = publish(ctx, pub.Publisher)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			assert.NotErrorIs(t, err, ErrOutcomeUnknown, "an incomplete delivery is never stored")
			assert.Eventually(t, cut.closed.Load, 5*time.Second, time.Millisecond, "the link is detached")

			ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			require.NoError(t, publish(ctx, pub.Publisher), "the next publish, on a new link")
			senders := h.fb.conn(0).sendersTo("orders")
			require.Len(t, senders, 1)
			assert.Len(t, senders[0].Sent(), 1)
			assert.Equal(t, 1, h.fb.connCount(), "the connection is kept")
		})
	}
}

// serialLink is a go-amqp link as its concurrent senders meet it: one
// transfer at a time (go-amqp's Sender.send holds the link's lock for the
// whole transfer). Its first transfer writes a frame, then is cut by its
// context before the next; a transfer after that would go out behind the
// incomplete delivery, which it counts. Its detach takes effect late, as
// go-amqp's does (through the link's own goroutine).
type serialLink struct {
	mu     sync.Mutex
	calls  int
	behind atomic.Int32
	closed atomic.Bool
	wrote  chan struct{} // closed once the first transfer wrote a frame
}

func (l *serialLink) SendWithReceipt(ctx context.Context, _ *amqp.Message, _ *amqp.SendWithReceiptOptions) (amqp.SendReceipt, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.calls++; l.calls > 1 {
		if !l.closed.Load() {
			l.behind.Add(1)
		}
		return amqp.SendReceipt{}, &amqp.LinkError{}
	}
	_, _ = ctx.Deadline() // the connection's writer, writing the first frame
	close(l.wrote)
	<-ctx.Done()
	return amqp.SendReceipt{}, &amqp.Error{Condition: amqp.ErrCondTransferLimitExceeded, Description: "credit limit exceeded for sending link x"}
}

func (l *serialLink) Send(context.Context, *amqp.Message, *amqp.SendOptions) error {
	return errors.New("serialLink: Send is not used")
}

func (l *serialLink) Close(context.Context) error {
	time.AfterFunc(2*time.Second, func() { l.closed.Store(true) })
	return nil
}

// A publish waiting for the link while another's transfer on it is cut
// between its frames never follows that transfer onto the link (where it
// would be written behind the incomplete delivery): it goes out on a new
// link, and succeeds; the other caller's context does not fail it.
func TestClientPublisherNeverWritesBehindATransferCutBetweenFrames(t *testing.T) {
	for name, publish := range publishWays {
		t.Run(name, func(t *testing.T) {
			link := &serialLink{wrote: make(chan struct{})}
			h := harnessOver(t, ClientOptions{}, func(c *fakeConn) amqpConn { return &cutConn{fakeConn: c, cut: link} }, "amqp://live:5672")
			pub, err := h.c.Publisher(context.Background(), "orders")
			require.NoError(t, err)

			short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			cut := make(chan error, 1)
			go func() { cut <- publish(short, pub.Publisher) }()
			<-link.wrote
			ctx, cancelLong := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancelLong()
			require.NoError(t, publish(ctx, pub.Publisher), "the waiting publish, on a new link")
			require.ErrorIs(t, <-cut, context.DeadlineExceeded)

			assert.Zero(t, link.behind.Load(), "transfers written behind the incomplete delivery")
			senders := h.fb.conn(0).sendersTo("orders")
			require.Len(t, senders, 1)
			assert.Len(t, senders[0].Sent(), 1)
		})
	}
}

func (*serialLink) writesFramesAsGoAMQP() {}

// A link cut between a transfer's frames is detached only once the
// outcomes of the transfers written on it before have come (complete
// deliveries the broker still answers): detached at once, their outcomes
// would be lost though their callers' contexts still ran. A wait that
// never ends is cut at the receipts' retry bound.
func TestCutLinkIsDetachedOnceItsEarlierOutcomesCame(t *testing.T) {
	for _, settles := range []bool{true, false} {
		t.Run(map[bool]string{true: "outcome comes", false: "outcome never comes"}[settles], func(t *testing.T) {
			link := &cutLink{frames: 2}
			h := harnessOver(t, ClientOptions{DialTimeout: 200 * time.Millisecond},
				func(c *fakeConn) amqpConn { return &cutConn{fakeConn: c, cut: link} }, "amqp://live:5672")
			pub, err := h.c.Publisher(context.Background(), "orders")
			require.NoError(t, err)
			sl, err := senderOf(pub).link(context.Background(), true)
			require.NoError(t, err)
			earlier := pendingTransfer{hasReceipt: true}
			sl.inflight.Add(1) // a transfer written before, its outcome awaited

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
			defer cancel()
			_, err = sl.write(ctx, amqp.NewMessage([]byte("large")))
			require.ErrorIs(t, err, errTransferCut)
			time.Sleep(100 * time.Millisecond)
			assert.False(t, link.closed.Load(), "detached while an earlier outcome was awaited")
			start := time.Now()
			if settles {
				sl.settled(&earlier)
			}
			assert.Eventually(t, link.closed.Load, 5*time.Second, time.Millisecond, "the cut link is detached")
			if !settles {
				assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "after the retry bound (twice DialTimeout)")
			}
		})
	}
}

// creditWrapper is a Sender of the caller's own around a link: it bounds
// each transfer with a context of its own (context.WithTimeout reads the
// given context's Deadline), and its link has no credit: every transfer
// waits until ctx ends, nothing written.
type creditWrapper struct{ closed atomic.Bool }

func (w *creditWrapper) SendWithReceipt(ctx context.Context, _ *amqp.Message, _ *amqp.SendWithReceiptOptions) (amqp.SendReceipt, error) {
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	<-wctx.Done()
	return amqp.SendReceipt{}, &amqp.Error{Condition: amqp.ErrCondTransferLimitExceeded, Description: "credit limit exceeded for sending link x"}
}

func (w *creditWrapper) Send(context.Context, *amqp.Message, *amqp.SendOptions) error {
	return errors.New("creditWrapper: Send is not used")
}

func (w *creditWrapper) Close(context.Context) error {
	w.closed.Store(true)
	return nil
}

// A Sender of the caller's own that reads the transfer's Deadline itself
// says nothing of frames written: a credit wait cut by ctx on it is a
// publish never sent, and the Sender is left open (only go-amqp's own
// Sender is known to read it just before writing a frame).
func TestCreditWaitOnAWrapperIsNotACut(t *testing.T) {
	w := &creditWrapper{}
	p := NewPublisher(w, "orders")
	for name, publish := range publishWays {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			err := publish(ctx, p)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			assert.NotErrorIs(t, err, errTransferCut)
			time.Sleep(50 * time.Millisecond)
			assert.False(t, w.closed.Load(), "the caller's Sender is left open")
		})
	}
}

// heldLink holds its first transfer until released (a link waiting for
// credit); later transfers go through at once (fakelink's accepted send
// is not a receiptSender, so they only count).
type heldLink struct {
	cutLink
	release chan struct{}
	calls   atomic.Int32
}

func (l *heldLink) SendWithReceipt(ctx context.Context, _ *amqp.Message, _ *amqp.SendWithReceiptOptions) (amqp.SendReceipt, error) {
	if l.calls.Add(1) == 1 {
		<-l.release
	}
	return amqp.SendReceipt{}, &amqp.Error{Condition: amqp.ErrCondTransferLimitExceeded, Description: "credit limit exceeded for sending link x"}
}

// A publish waiting for its turn on the link behind another that waits
// for credit ends with its own ctx, nothing written, instead of waiting
// for the other's.
func TestClientPublisherTurnOnTheLinkEndsWithItsContext(t *testing.T) {
	link := &heldLink{release: make(chan struct{})}
	defer close(link.release)
	h := harnessOver(t, ClientOptions{}, func(c *fakeConn) amqpConn { return &cutConn{fakeConn: c, cut: link} }, "amqp://live:5672")
	pub, err := h.c.Publisher(context.Background(), "orders")
	require.NoError(t, err)
	go func() { _, _ = pub.Publish(context.Background(), Job(urnCreated, orderData)) }()
	require.Eventually(t, func() bool { return link.calls.Load() == 1 }, 5*time.Second, time.Millisecond)

	for name, publish := range publishWays {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := publish(ctx, pub.Publisher)
			took := time.Since(start)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			assert.NotErrorIs(t, err, ErrOutcomeUnknown, "nothing was written")
			assert.Less(t, took, 3*time.Second, "it ended with its own ctx")
			assert.Equal(t, int32(1), link.calls.Load(), "it never reached the link")
		})
	}
}
