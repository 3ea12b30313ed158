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

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// hangingCloses wraps the Client's dial seam so every link's Close waits
// for its context, as a detach over a half-open network does.
type hangingCloses struct {
	mu     sync.Mutex
	closes int
}

func (hc *hangingCloses) wrap(dial dialFunc) dialFunc {
	return func(ctx context.Context, b *broker) (amqpConn, error) {
		conn, err := dial(ctx, b)
		return hangWrap(conn, err, func(c amqpConn) amqpConn { return hangConn{amqpConn: c, hc: hc} })
	}
}

// hangWrap wraps what the inner seam opened, unless it failed.
func hangWrap[T any](v T, err error, wrap func(T) T) (T, error) {
	if err != nil {
		var zero T
		return zero, err
	}
	return wrap(v), nil
}

// closeAndHang closes the inner link, then waits for ctx as a detach over a
// half-open network does.
func (hc *hangingCloses) closeAndHang(ctx context.Context, inner func(context.Context) error) error {
	_ = inner(ctx)
	hc.mu.Lock()
	hc.closes++
	hc.mu.Unlock()
	<-ctx.Done()
	return ctx.Err()
}

func (hc *hangingCloses) count() int {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return hc.closes
}

type hangConn struct {
	amqpConn
	hc *hangingCloses
}

func (c hangConn) NewSession(ctx context.Context, opts *amqp.SessionOptions) (amqpSession, error) {
	s, err := c.amqpConn.NewSession(ctx, opts)
	return hangWrap(s, err, func(s amqpSession) amqpSession { return hangSession{amqpSession: s, hc: c.hc} })
}

type hangSession struct {
	amqpSession
	hc *hangingCloses
}

func (s hangSession) NewSender(ctx context.Context, target string, opts *amqp.SenderOptions) (linkSender, error) {
	l, err := s.amqpSession.NewSender(ctx, target, opts)
	return hangWrap(l, err, func(l linkSender) linkSender { return hangSender{linkSender: l, hc: s.hc} })
}

func (s hangSession) NewReceiver(ctx context.Context, source string, opts *amqp.ReceiverOptions) (linkReceiver, error) {
	r, err := s.amqpSession.NewReceiver(ctx, source, opts)
	return hangWrap(r, err, func(r linkReceiver) linkReceiver { return hangReceiver{linkReceiver: r, hc: s.hc} })
}

type hangSender struct {
	linkSender
	hc *hangingCloses
}

func (s hangSender) Close(ctx context.Context) error {
	return s.hc.closeAndHang(ctx, s.linkSender.Close)
}

type hangReceiver struct {
	linkReceiver
	hc *hangingCloses
}

func (r hangReceiver) Close(ctx context.Context) error {
	return r.hc.closeAndHang(ctx, r.linkReceiver.Close)
}

func TestAPublishOnABrokenLinkDoesNotWaitForItsDetach(t *testing.T) {
	var calls atomic.Int32
	hc := &hangingCloses{}
	h := newHarness(t, []string{"amqp://live:5672"}, nil, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) {
			c.outcome = func(ctx context.Context, m *amqp.Message) (amqp.DeliveryState, error) {
				if calls.Add(1) == 1 {
					return nil, &amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondDetachForced}}
				}
				return fakelink.Accept(ctx, m)
			}
		}
	})
	h.b.dial = hc.wrap(h.fb.dial)
	require.NoError(t, h.dial())
	p, err := h.c.Publisher(context.Background(), "orders")
	require.NoError(t, err)

	_, err = p.Publish(context.Background(), Job(urnCreated, orderData))
	require.ErrorIs(t, err, ErrOutcomeUnknown, "the link broke after the transfer was written")

	// The next publishes find the link broken: its detach hangs, but in the
	// background, holding no lock they wait on.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := p.Publish(ctx, Job(urnCreated, orderData))
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	assert.Len(t, h.keptOn("orders"), 4)
	assert.Eventually(t, func() bool { return hc.count() == 1 }, 5*time.Second, time.Millisecond, "the broken link's detach was started")
}

// hangingConsume starts a Consume on a Client whose link detaches hang
// (the dial timeout a minute, the close grace 50 ms) and returns it with
// its attached receiver.
func hangingConsume(t *testing.T) (*harness, *hangingCloses, *consumeRun, *fakelink.Receiver) {
	t.Helper()
	hc := &hangingCloses{}
	attached := make(chan *fakelink.Receiver, 8)
	h := newHarness(t, []string{"amqp://live:5672"}, &ClientOptions{DialTimeout: time.Minute}, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) { c.attached = attached }
	})
	h.b.dial = hc.wrap(h.fb.dial)
	h.b.closeGrace = 50 * time.Millisecond
	require.NoError(t, h.dial())
	run := startConsume(h, "orders", mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}))
	r := attachedReceiver(t, attached)
	return h, hc, run, r
}

func TestConsumeReturnsPromptlyWhenTheDetachHangs(t *testing.T) {
	h, hc, run, r := hangingConsume(t)
	h.ev.wait(t, EventConsumerAttached)

	start := time.Now()
	run.cancel()
	require.NoError(t, run.wait(t))
	took := time.Since(start)
	assert.Less(t, took, 2*time.Second, "the receiver and dead-letter detaches are bounded by the grace, not the dial timeout")
	assert.True(t, r.Closed(), "the receiver's detach was sent")
	assert.Equal(t, 2, hc.count(), "both detaches were tried")
	t.Logf("Consume returned %v after cancel with two hanging detaches (grace %v, dial timeout 1m)", took.Round(time.Millisecond), h.b.closeGrace)
}

func TestConsumeCancelledWhileAFailedReceiverDetaches(t *testing.T) {
	_, hc, run, r := hangingConsume(t)
	r.Fail(&amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondDetachForced}})
	require.Eventually(t, func() bool { return hc.count() == 1 }, 5*time.Second, time.Millisecond, "the failed receiver's detach hangs")

	start := time.Now()
	run.cancel()
	err := run.wait(t)
	assert.NoError(t, err)
	assert.Less(t, time.Since(start), 2*time.Second, "the hanging detach is bounded by Consume's context")
	assert.False(t, errors.Is(err, ErrClosed))
}
