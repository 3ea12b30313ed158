package artemis

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

var orderData = json.RawMessage(`{"order_id":1042}`)

// newPublisherHarness dials a fake broker and attaches a publisher to
// "orders".
func newPublisherHarness(t *testing.T, prepare func(*fakeBroker), opts ...PublishOption) (*harness, *ClientPublisher) {
	t.Helper()
	h := newHarness(t, []string{"amqp://live:5672", "amqp://backup:5672"}, nil, prepare)
	require.NoError(t, h.dial())
	p, err := h.c.Publisher(context.Background(), "orders", opts...)
	require.NoError(t, err)
	return h, p
}

// sentTo lists every transfer attempted to addr on every connection.
func (h *harness) sentTo(addr string) []*amqp.Message {
	var out []*amqp.Message
	for i := range h.fb.connCount() {
		for _, s := range h.fb.conn(i).sendersTo(addr) {
			out = append(out, s.Sent()...)
		}
	}
	return out
}

// keptOn lists the transfers the fake broker accepted on addr.
func (h *harness) keptOn(addr string) []*amqp.Message {
	var out []*amqp.Message
	for i := range h.fb.connCount() {
		for _, s := range h.fb.conn(i).sendersTo(addr) {
			out = append(out, s.Kept()...)
		}
	}
	return out
}

// dropConnDuringSend makes the first transfer on the first connection fail
// as a broker crash after the write does: the connection dies and the
// sender sees a *amqp.ConnError. Later transfers use next.
func dropConnDuringSend(next func(context.Context, *amqp.Message) (amqp.DeliveryState, error)) func(*fakeBroker) {
	return func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) {
			if fb.connCount() > 1 {
				c.outcome = next
				return
			}
			c.outcome = func(context.Context, *amqp.Message) (amqp.DeliveryState, error) {
				c.kill(&amqp.ConnError{})
				return nil, &amqp.ConnError{}
			}
		}
	}
}

func TestPublisherAttachesWithTheQueueCapability(t *testing.T) {
	h, p := newPublisherHarness(t, nil)
	senders := h.fb.conn(0).sendersTo("orders")
	require.Len(t, senders, 1)
	opts := senders[0].Options
	assert.Equal(t, []string{"queue"}, opts.TargetCapabilities)
	require.NotNil(t, opts.SettlementMode)
	assert.Equal(t, amqp.SenderSettleModeUnsettled, *opts.SettlementMode, "unsettled, so every transfer has an outcome")

	id, err := p.Publish(context.Background(), Job(urnCreated, orderData))
	require.NoError(t, err)
	kept := h.keptOn("orders")
	require.Len(t, kept, 1)
	assert.Equal(t, id, kept[0].Properties.MessageID)
	assert.NotContains(t, kept[0].ApplicationProperties, PropDuplicateID, "duplicate detection is opt-in")
	assert.Equal(t, []ConnectionEventKind{EventConnected, EventSenderAttached}, h.ev.kinds())
}

func TestPublisherRedialsAfterAnIdleLoss(t *testing.T) {
	// The connection died while idle: the loss is known before anything is
	// written, so the publish goes to a new connection, once, even without
	// duplicate detection.
	h, p := newPublisherHarness(t, nil)
	h.fb.conn(0).kill(&amqp.ConnError{})
	h.ev.wait(t, EventDisconnected)

	id, err := p.Publish(context.Background(), Job(urnCreated, orderData))
	require.NoError(t, err)
	sent := h.sentTo("orders")
	require.Len(t, sent, 1, "nothing was sent on the dead link")
	assert.Equal(t, id, sent[0].Properties.MessageID)
	assert.Equal(t, []string{"amqp://live:5672", "amqp://backup:5672"}, h.fb.dialed(), "the backup is tried first after losing the live broker")
	assert.Equal(t, []ConnectionEventKind{EventConnected, EventSenderAttached, EventReconnected, EventSenderReattached}, h.ev.kinds())
}

func TestPublisherDoesNotRetryAnUnknownOutcomeWithoutDuplicateDetection(t *testing.T) {
	h, p := newPublisherHarness(t, dropConnDuringSend(nil))
	id, err := p.Publish(context.Background(), Job(urnCreated, orderData))
	require.Error(t, err)
	assert.Empty(t, id)
	assert.ErrorIs(t, err, ErrOutcomeUnknown)
	var ce *amqp.ConnError
	assert.ErrorAs(t, err, &ce)
	assert.Len(t, h.sentTo("orders"), 1, "not retried: the first copy may be stored")

	// The next publish re-dials and works.
	_, err = p.Publish(context.Background(), Job(urnCreated, orderData))
	require.NoError(t, err)
	assert.Len(t, h.keptOn("orders"), 1)
	assert.NotContains(t, h.ev.kinds(), EventPublishRetried)
}

func TestPublisherRetriesOnceWithDuplicateDetection(t *testing.T) {
	cases := map[string]struct {
		publisherOpts []PublishOption
		callOpts      []PublishOption
	}{
		"publisher option": {publisherOpts: []PublishOption{WithDuplicateDetection()}},
		"per-call option":  {callOpts: []PublishOption{WithDuplicateDetection()}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h, p := newPublisherHarness(t, dropConnDuringSend(nil), tc.publisherOpts...)
			id, err := p.Publish(context.Background(), Job(urnCreated, orderData), tc.callOpts...)
			require.NoError(t, err)

			sent := h.sentTo("orders")
			require.Len(t, sent, 2, "sent, then sent once more after re-dialing")
			assert.Same(t, sent[0], sent[1], "the very same message: same meta.id, same duplicate id")
			assert.Equal(t, id, sent[1].ApplicationProperties[PropDuplicateID])
			assert.Equal(t, id, sent[1].Properties.MessageID)
			assert.Len(t, h.keptOn("orders"), 1)
			assert.Equal(t, 2, h.fb.connCount())
			retried := h.ev.wait(t, EventPublishRetried)
			assert.Equal(t, "orders", retried.Address)
			assert.Error(t, retried.Err)
		})
	}
}

func TestPublisherRetriesOnlyOnce(t *testing.T) {
	h, p := newPublisherHarness(t, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) {
			c.outcome = func(context.Context, *amqp.Message) (amqp.DeliveryState, error) {
				c.kill(&amqp.ConnError{})
				return nil, &amqp.ConnError{}
			}
		}
	}, WithDuplicateDetection())
	_, err := p.Publish(context.Background(), Job(urnCreated, orderData))
	assert.ErrorIs(t, err, ErrOutcomeUnknown)
	assert.Len(t, h.sentTo("orders"), 2)
}

func TestPublisherRetryThatCannotReconnectIsAnUnknownOutcome(t *testing.T) {
	h, p := newPublisherHarness(t, func(fb *fakeBroker) {
		dropConnDuringSend(nil)(fb)
		fb.dialErr = func(n int, _ *broker) error {
			if n > 1 {
				return refused
			}
			return nil
		}
	}, WithDuplicateDetection())
	_, err := p.Publish(context.Background(), Job(urnCreated, orderData))
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrOutcomeUnknown)
	assert.NotErrorIs(t, err, ErrConnect, "it may be stored: not a publish that was never sent")
	assert.Contains(t, err.Error(), "re-attaching for the retry", "why the resend was not made")
	assert.Len(t, h.sentTo("orders"), 1)
	assert.NotContains(t, h.ev.kinds(), EventPublishRetried, "no resend was made")
}

func TestPublisherNeverRetriesWhenTheContextEnds(t *testing.T) {
	started := make(chan struct{})
	h, p := newPublisherHarness(t, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) {
			c.outcome = func(ctx context.Context, m *amqp.Message) (amqp.DeliveryState, error) {
				close(started)
				return fakelink.Hang(ctx, m)
			}
		}
	}, WithDuplicateDetection())
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	_, err := p.Publish(ctx, Job(urnCreated, orderData))
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrOutcomeUnknown, "the transfer may have been written before the context ended")
	assert.ErrorIs(t, err, context.Canceled)
	assert.Len(t, h.sentTo("orders"), 1)
	assert.Equal(t, 1, h.fb.connCount())
}

// TestPublisherEndedByItsContextKeepsTheLink: a publish whose own context
// ends while it waits for the outcome says nothing about the link that
// other callers share: the next publish uses the same link, no re-attach.
func TestPublisherEndedByItsContextKeepsTheLink(t *testing.T) {
	for _, d := range []time.Duration{time.Millisecond, 2 * minOutcomeWait} {
		t.Run(d.String(), func(t *testing.T) {
			var calls atomic.Int32
			h, p := newPublisherHarness(t, func(fb *fakeBroker) {
				fb.setup = func(c *fakeConn) {
					c.outcome = func(ctx context.Context, m *amqp.Message) (amqp.DeliveryState, error) {
						if calls.Add(1) == 1 {
							return fakelink.Hang(ctx, m)
						}
						return fakelink.Accept(ctx, m)
					}
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), d)
			_, err := p.Publish(ctx, Job(urnCreated, orderData))
			cancel()
			assert.ErrorIs(t, err, ErrOutcomeUnknown)
			assert.ErrorIs(t, err, context.DeadlineExceeded)

			_, err = p.Publish(context.Background(), Job(urnCreated, orderData))
			require.NoError(t, err)
			assert.Len(t, h.fb.conn(0).sendersTo("orders"), 1, "the same link, not a new one")
			assert.Equal(t, 1, h.fb.connCount())
		})
	}
}

func TestPublisherReturnsTheBrokersAnswer(t *testing.T) {
	cases := map[string]func(context.Context, *amqp.Message) (amqp.DeliveryState, error){
		"rejected": fakelink.Reject,
		"released": fakelink.Release,
		"modified": fakelink.Modify,
	}
	for name, outcome := range cases {
		t.Run(name, func(t *testing.T) {
			h, p := newPublisherHarness(t, func(fb *fakeBroker) {
				fb.setup = func(c *fakeConn) { c.outcome = outcome }
			}, WithDuplicateDetection())
			_, err := p.Publish(context.Background(), Job(urnCreated, orderData))
			assert.ErrorIs(t, err, ErrNotAccepted)
			assert.NotErrorIs(t, err, ErrOutcomeUnknown)
			var oe *OutcomeError
			assert.ErrorAs(t, err, &oe)
			assert.Len(t, h.sentTo("orders"), 1, "the broker answered: nothing to retry")
			assert.Equal(t, 1, h.fb.connCount())
		})
	}
}

func TestPublisherTransferThatNeverLeftIsNotUnknown(t *testing.T) {
	// go-amqp's answer when ctx ends before the transfer is handed over.
	notSent := &amqp.Error{Condition: amqp.ErrCondTransferLimitExceeded, Description: "credit limit exceeded for sending link"}
	h, p := newPublisherHarness(t, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) {
			c.outcome = func(context.Context, *amqp.Message) (amqp.DeliveryState, error) { return nil, notSent }
		}
	}, WithDuplicateDetection())
	_, err := p.Publish(context.Background(), Job(urnCreated, orderData))
	assert.ErrorIs(t, err, notSent)
	assert.NotErrorIs(t, err, ErrOutcomeUnknown)
	assert.Len(t, h.sentTo("orders"), 1)
}

func TestPublisherReattachesALostLinkOnTheSameConnection(t *testing.T) {
	var calls atomic.Int32
	h, p := newPublisherHarness(t, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) {
			c.outcome = func(ctx context.Context, m *amqp.Message) (amqp.DeliveryState, error) {
				if calls.Add(1) == 1 {
					return nil, &amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondDetachForced}}
				}
				return fakelink.Accept(ctx, m)
			}
		}
	}, WithDuplicateDetection())
	_, err := p.Publish(context.Background(), Job(urnCreated, orderData))
	require.NoError(t, err)
	assert.Equal(t, 1, h.fb.connCount(), "a detached link does not cost the connection")
	senders := h.fb.conn(0).sendersTo("orders")
	require.Len(t, senders, 2)
	assert.Eventually(t, senders[0].Closed, 5*time.Second, time.Millisecond, "the dead link is closed (in the background)")
	assert.Len(t, h.keptOn("orders"), 1)
}

func TestPublisherAttachRefused(t *testing.T) {
	h := newHarness(t, []string{"amqp://live:5672"}, nil, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) {
			c.attachErr = func(string, bool) error {
				return &amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondUnauthorizedAccess, Description: "User babel does not have permission"}}
			}
		}
	})
	require.NoError(t, h.dial())
	_, err := h.c.Publisher(context.Background(), "orders")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "attach sender to orders")
	assert.Contains(t, err.Error(), "permission")
	assert.False(t, h.fb.conn(0).dead(), "a refused link does not cost the connection")

	_, err = h.c.Publisher(context.Background(), " ")
	assert.ErrorIs(t, err, ErrInvalidConfig)
}

func TestPublisherClose(t *testing.T) {
	h, p := newPublisherHarness(t, nil)
	require.NoError(t, p.Close(context.Background()))
	assert.True(t, h.fb.conn(0).sendersTo("orders")[0].Closed())
	_, err := p.Publish(context.Background(), Job(urnCreated, orderData))
	assert.ErrorIs(t, err, ErrClosed)
	require.NoError(t, p.Close(context.Background()))
	assert.False(t, h.fb.conn(0).dead(), "the Client's connection stays open")
}

func TestPublishAfterClientClose(t *testing.T) {
	h, p := newPublisherHarness(t, nil)
	require.NoError(t, h.c.Close(context.Background()))
	_, err := p.Publish(context.Background(), Job(urnCreated, orderData))
	assert.ErrorIs(t, err, ErrClosed)
}

func TestConcurrentPublishesAfterALossShareOneReconnect(t *testing.T) {
	h, p := newPublisherHarness(t, nil)
	h.fb.conn(0).kill(&amqp.ConnError{})

	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			_, err := p.Publish(context.Background(), Job(urnCreated, orderData))
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	assert.Equal(t, 2, h.fb.connCount())
	assert.Len(t, h.fb.conn(1).sendersTo("orders"), 1, "one re-attach for all of them")
	assert.Len(t, h.keptOn("orders"), 20)
}

func TestClientPublisherSendIsStrict(t *testing.T) {
	// Send, unlike go-amqp's, fails a released transfer: only accepted counts.
	h, p := newPublisherHarness(t, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) { c.outcome = fakelink.Release }
	})
	_ = h
	err := senderOf(p).Send(context.Background(), orderMessage(t, 0), nil)
	assert.ErrorIs(t, err, ErrNotAccepted)
}

func TestTransferOverAPlainSender(t *testing.T) {
	// A link that reports no outcome is trusted when Send returns nil.
	accepting := fakelink.PlainSender{S: &fakelink.Sender{}}
	state, err := transfer(context.Background(), accepting, orderMessage(t, 0))
	require.NoError(t, err)
	assert.IsType(t, &amqp.StateAccepted{}, state)

	closed := fakelink.PlainSender{S: &fakelink.Sender{Outcome: fakelink.Closed}}
	_, err = transfer(context.Background(), closed, orderMessage(t, 0))
	assert.ErrorIs(t, err, fakelink.ErrLinkClosed)
}

// A ClientPublisher's publish whose ctx ends while it waits for link
// credit: ctx's error, not an unknown outcome (nothing was written, so
// nothing is resent, even with duplicate detection), and no outcome
// timeout counted against the connection.
func TestPublisherCreditWaitEndedByContextIsNotSent(t *testing.T) {
	h, p := newPublisherHarness(t, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) {
			c.outcome = func(ctx context.Context, _ *amqp.Message) (amqp.DeliveryState, error) {
				<-ctx.Done()
				return nil, &amqp.Error{Condition: amqp.ErrCondTransferLimitExceeded, Description: "credit limit exceeded for sending link"}
			}
		}
	}, WithDuplicateDetection())
	h.b.minOutcomeWait = 0
	for range DefaultOutcomeTimeouts + 1 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		_, err := p.Publish(ctx, Job(urnCreated, orderData))
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.NotErrorIs(t, err, ErrOutcomeUnknown)

		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Millisecond)
		_, err = p.PublishWithReceipt(ctx, Job(urnCreated, orderData))
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.NotErrorIs(t, err, ErrOutcomeUnknown)
	}
	assert.Len(t, h.sentTo("orders"), 2*(DefaultOutcomeTimeouts+1), "none resent")
	assert.Equal(t, 1, h.fb.connCount(), "the connection is not taken for dead")
	assert.Len(t, h.fb.conn(0).sendersTo("orders"), 1, "nor the link")
	assert.NotContains(t, h.ev.kinds(), EventPublishRetried)
}

// slowCloseHarness is newHarness (live and backup URLs) whose connections
// Close hangs until the test ends, dialled already.
func slowCloseHarness(t *testing.T, prepare func(*fakeBroker)) *harness {
	t.Helper()
	urls := []string{"amqp://live:5672", "amqp://backup:5672"}
	h := newHarness(t, urls, nil, prepare)
	unblock := make(chan struct{})
	bc, err := newClient(urls, &ClientOptions{OnEvent: h.ev.on}, func(ctx context.Context, b *broker) (amqpConn, error) {
		cn, err := h.fb.dial(ctx, b)
		if err != nil {
			return nil, err
		}
		hangClose(cn.(*fakeConn), unblock)
		return cn, nil
	})
	require.NoError(t, err)
	bc.random = func() float64 { return 0.5 }
	bc.after = h.timers.after
	c := clientOver(bc)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	t.Cleanup(func() { close(unblock) }) // runs first
	h.b, h.c = bc, c
	require.NoError(t, h.dial())
	return h
}

// A connection the Client dropped (taken for dead) is left at once by
// every publisher, even while its close still hangs: the next publish
// re-dials.
func TestPublisherLeavesADroppedConnectionWhoseCloseHangs(t *testing.T) {
	h := slowCloseHarness(t, nil)
	c := h.c
	p1, err := c.Publisher(context.Background(), "orders")
	require.NoError(t, err)
	p2, err := c.Publisher(context.Background(), "audit")
	require.NoError(t, err)
	_, err = p1.Publish(context.Background(), Job(urnCreated, orderData))
	require.NoError(t, err)
	h.b.mu.Lock()
	cn := h.b.cur
	h.b.mu.Unlock()
	require.NotNil(t, cn)
	h.b.drop(cn, errors.New("taken for dead"))
	require.False(t, h.fb.conn(0).dead(), "its close still hangs")

	for _, p := range []*ClientPublisher{p1, p2} {
		_, err = p.Publish(context.Background(), Job(urnCreated, orderData))
		require.NoError(t, err)
	}
	require.Equal(t, 2, h.fb.connCount(), "re-dialed")
	assert.Len(t, h.fb.conn(0).sendersTo("orders")[0].Sent(), 1, "nothing more on the dropped connection")
	assert.Empty(t, h.fb.conn(0).sendersTo("audit")[0].Sent())
	assert.Len(t, h.fb.conn(1).sendersTo("orders"), 1)
	assert.Len(t, h.fb.conn(1).sendersTo("audit"), 1)
	assert.Len(t, h.keptOn("orders"), 2)
	assert.Len(t, h.keptOn("audit"), 1)
}

// Close whose ctx ends while another caller's attach is under way: the
// link that attach makes is detached, not kept.
func TestPublisherCloseDuringAnAttachDetachesItsLink(t *testing.T) {
	h := newHarness(t, []string{"amqp://live:5672"}, nil, nil)
	require.NoError(t, h.dial())
	entered, release := make(chan struct{}), make(chan struct{})
	cn := h.fb.conn(0)
	cn.mu.Lock()
	cn.attachErr = func(string, bool) error {
		close(entered)
		<-release
		return nil
	}
	cn.mu.Unlock()
	s := h.b.newSender("orders")
	attached := make(chan error, 1)
	go func() {
		_, err := s.link(context.Background(), true)
		attached <- err
	}()
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, s.close(ctx), context.Canceled)
	close(release)
	require.ErrorIs(t, <-attached, ErrClosed)
	senders := cn.sendersTo("orders")
	require.Len(t, senders, 1)
	assert.Eventually(t, senders[0].Closed, 5*time.Second, time.Millisecond, "the link is detached")
	assert.Nil(t, s.cur.Load())
	assert.NotContains(t, h.ev.kinds(), EventSenderAttached)
}

// The same, when the attach finishes before the check (the background
// detach of close takes the stored link).
func TestPublisherCloseGivingUpOnTheAttachLockStillDetaches(t *testing.T) {
	h := newHarness(t, []string{"amqp://live:5672"}, nil, nil)
	require.NoError(t, h.dial())
	s := h.b.newSender("orders")
	_, err := s.link(context.Background(), true)
	require.NoError(t, err)
	s.sem <- struct{}{} // as an attach under way holds it
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, s.close(ctx), context.Canceled)
	senders := h.fb.conn(0).sendersTo("orders")
	require.Len(t, senders, 1)
	assert.False(t, senders[0].Closed())
	<-s.sem
	assert.Eventually(t, senders[0].Closed, 5*time.Second, time.Millisecond, "detached once the lock is free")
}

// A ClientPublisher's Close whose ctx is done already returns ctx's error
// every time, the detach a fast one or not, and the publisher is closed:
// its link is detached in the background and a later publish fails with
// ErrClosed.
func TestClientPublisherCloseWithADoneContext(t *testing.T) {
	h := newHarness(t, []string{"amqp://live:5672"}, nil, nil)
	require.NoError(t, h.dial())
	p, err := h.c.Publisher(context.Background(), "orders")
	require.NoError(t, err)
	_, err = p.Publish(context.Background(), Job(urnCreated, orderData))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, p.Close(ctx), context.Canceled)
	_, err = p.Publish(context.Background(), Job(urnCreated, orderData))
	assert.ErrorIs(t, err, ErrClosed)
	senders := h.fb.conn(0).sendersTo("orders")
	require.Len(t, senders, 1)
	assert.Eventually(t, senders[0].Closed, 5*time.Second, time.Millisecond, "detached in the background")
	require.NoError(t, p.Close(context.Background()), "closed already")
}

// A link given up after a failed transfer, and not yet replaced by the next
// publish's attach, is still detached by Close: it is not left on the
// connection, which stays open.
func TestPublisherCloseDetachesABrokenLink(t *testing.T) {
	h, p := newPublisherHarness(t, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) {
			c.outcome = func(context.Context, *amqp.Message) (amqp.DeliveryState, error) {
				return nil, &amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondDetachForced}}
			}
		}
	})
	_, err := p.Publish(context.Background(), Job(urnCreated, orderData))
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	senders := h.fb.conn(0).sendersTo("orders")
	require.Len(t, senders, 1)
	require.False(t, senders[0].Closed(), "given up, not yet retired")

	require.NoError(t, p.Close(context.Background()))
	assert.True(t, senders[0].Closed(), "the broken link is detached")
	assert.False(t, h.fb.conn(0).dead(), "the Client's connection stays open")
}

// An OnEvent callback that ends its goroutine (runtime.Goexit) while a
// publish attaches its link (here the attach fails at the connection
// level, which reports EventDisconnected from within it) leaves the
// sender able to attach again: the next publish goes out.
func TestClientPublisherAttachesAgainAfterAnOnEventThatExits(t *testing.T) {
	var armed atomic.Bool
	h := harnessOver(t, ClientOptions{OnEvent: func(ev ConnectionEvent) {
		if armed.Load() && ev.Kind == EventDisconnected {
			runtime.Goexit()
		}
	}}, func(c *fakeConn) amqpConn { return c }, "amqp://live:5672")
	pub, err := h.c.Publisher(context.Background(), "orders")
	require.NoError(t, err)
	s := senderOf(pub)
	h.fb.conn(0).mu.Lock()
	h.fb.conn(0).attachErr = func(string, bool) error { return &amqp.ConnError{} }
	h.fb.conn(0).mu.Unlock()
	s.cur.Load().broken.Store(true) // the link is lost: the next publish attaches
	armed.Store(true)

	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, _ = pub.Publish(ctx, Job(urnCreated, nil))
	}()
	<-done
	armed.Store(false)
	assert.Zero(t, len(s.sem), "the attach slot is free again")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = pub.Publish(ctx, Job(urnCreated, nil))
	require.NoError(t, err, "the next publish, on a new connection")
}
