package artemis

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// consumeRun runs Client.Consume in the background.
type consumeRun struct {
	cancel context.CancelFunc
	done   chan error
}

func startConsume(h *harness, queue string, cons *Consumer) *consumeRun {
	ctx, cancel := context.WithCancel(context.Background())
	run := &consumeRun{cancel: cancel, done: make(chan error, 1)}
	go func() { run.done <- h.c.Consume(ctx, queue, cons) }()
	h.t.Cleanup(func() {
		cancel()
		if err := <-run.done; err != nil && !errors.Is(err, ErrClosed) {
			h.t.Errorf("Consume ended with %v", err)
		}
	})
	return run
}

// wait returns Consume's result, failing the test if it does not come.
func (r *consumeRun) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("Consume did not return")
		return nil
	}
}

// handled collects the meta.ids a handler saw.
type handled struct {
	mu  sync.Mutex
	ids []string
	ch  chan string
}

func newHandled() *handled { return &handled{ch: make(chan string, 1024)} }

func (h *handled) handler(fail error) HandlerFunc {
	return func(_ context.Context, env *Envelope, _ *amqp.Message) error {
		h.mu.Lock()
		h.ids = append(h.ids, env.Meta.ID)
		h.mu.Unlock()
		h.ch <- env.Meta.ID
		return fail
	}
}

func (h *handled) next(t *testing.T) string {
	t.Helper()
	select {
	case id := <-h.ch:
		return id
	case <-time.After(5 * time.Second):
		t.Fatal("no message was handled")
		return ""
	}
}

func messageID(m *amqp.Message) string { return m.Properties.MessageID.(string) }

// attachedReceiver waits for the next receiver attached on any connection.
// refuseReceivers prepares a broker that refuses every receiver attach (the
// queue's link fails) and lets senders attach.
func refuseReceivers(fb *fakeBroker) {
	fb.setup = func(c *fakeConn) {
		c.attachErr = func(_ string, receiver bool) error {
			if receiver {
				return &amqp.LinkError{}
			}
			return nil
		}
	}
}

// liveHarness is a harness on one live broker whose every connection
// reports each receiver attached on the returned channel.
func liveHarness(t *testing.T) (*harness, chan *fakelink.Receiver) {
	t.Helper()
	attached := make(chan *fakelink.Receiver, 8)
	h := newHarness(t, []string{"amqp://live:5672"}, nil, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) { c.attached = attached }
	})
	return h, attached
}

func attachedReceiver(t *testing.T, ch chan *fakelink.Receiver) *fakelink.Receiver {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no receiver was attached")
		return nil
	}
}

func TestConsumeAttachesTheReceiverAndTheDeadLetterSender(t *testing.T) {
	cases := []struct {
		name        string
		concurrency int
		credit      int
		wantCredit  int32
	}{
		{"one worker", 1, 0, 100},
		{"eight workers", 8, 0, 100},
		{"sixty-four workers", 64, 0, 128},
		{"explicit credit", 4, 3, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, attached := liveHarness(t)
			require.NoError(t, h.dial())
			seen := newHandled()
			cons := mustConsumer(t, Handlers{urnCreated: seen.handler(errors.New("gateway down"))}, WithMaxTries(1), WithConcurrency(tc.concurrency), WithCredit(tc.credit))
			run := startConsume(h, "orders", cons)

			r := attachedReceiver(t, attached)
			assert.Equal(t, "orders", r.Address())
			assert.Equal(t, []string{"queue"}, r.Options.SourceCapabilities)
			assert.Equal(t, int32(-1), r.Options.Credit, "credit granted by hand: the count and byte window")
			require.NotNil(t, r.Options.RequestedSenderSettleMode)
			assert.Equal(t, amqp.SenderSettleModeUnsettled, *r.Options.RequestedSenderSettleMode, "the consumer settles every delivery itself")

			// The dead-letter sender attaches after the receiver, before
			// Consume reports the consumer attached.
			h.ev.wait(t, EventConsumerAttached)
			dlqs := h.fb.conn(0).sendersTo("orders.dlq")
			require.Len(t, dlqs, 1, "the dead-letter sender is attached with the receiver")
			assert.Equal(t, []string{"queue"}, dlqs[0].Options.TargetCapabilities)

			// A failure at the limit is dead-lettered through the Client's sender.
			msg := orderMessage(t, 0)
			r.Push(msg)
			require.NoError(t, r.WaitSettled(context.Background(), 1))
			d, _ := r.Disposition(msg)
			assert.Equal(t, fakelink.Accepted, d)
			// One delivery first; its size opens the window to the credit.
			grants := r.Grants()
			require.GreaterOrEqual(t, len(grants), 2, "grants %v", grants)
			assert.Equal(t, uint32(1), grants[0], "the first grant is one delivery")
			assert.Equal(t, tc.wantCredit, int32(grants[0]+grants[1]), "the window opens to the credit")
			kept := h.keptOn("orders.dlq")
			require.Len(t, kept, 1)
			assert.Contains(t, kept[0].Value, `"reason":"failed"`)
			assert.Contains(t, kept[0].Value, `"original_queue":"orders"`)

			run.cancel()
			require.NoError(t, run.wait(t))
			assert.True(t, r.Closed(), "the receiver is closed when Consume returns")
			assert.True(t, dlqs[0].Closed(), "and so is the dead-letter sender")
			assert.Nil(t, cons.dlq, "the caller's Consumer is not modified")
			assert.Equal(t, []ConnectionEventKind{EventConnected, EventSenderAttached, EventConsumerAttached}, h.ev.kinds())
		})
	}
}

func TestConsumeResumesAfterTheConnectionDrops(t *testing.T) {
	first, second := orderMessage(t, 0), orderMessage(t, 0)
	attached := make(chan *fakelink.Receiver, 8)
	h := newHarness(t, []string{"amqp://live:5672", "amqp://backup:5672"}, nil, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) {
			c.attached = attached
			msg := first
			if fb.connCount() > 1 {
				msg = second
			}
			c.deliveries = func() []*amqp.Message { return []*amqp.Message{msg} }
		}
	})
	require.NoError(t, h.dial())
	seen := newHandled()
	run := startConsume(h, "orders", mustConsumer(t, Handlers{urnCreated: seen.handler(nil)}))

	r1 := attachedReceiver(t, attached)
	assert.Equal(t, messageID(first), seen.next(t))
	require.NoError(t, r1.WaitSettled(context.Background(), 1))

	h.fb.conn(0).kill(&amqp.ConnError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondConnectionForced, Description: "broker shutting down"}})

	assert.Equal(t, 90*time.Millisecond, h.timers.next(t), "the first wait: 100ms less 20% jitter at random 0.5")
	r2 := attachedReceiver(t, attached)
	assert.Equal(t, messageID(second), seen.next(t), "listening resumed on the new connection")
	require.NoError(t, r2.WaitSettled(context.Background(), 1))
	d, _ := r2.Disposition(second)
	assert.Equal(t, fakelink.Accepted, d)

	assert.Equal(t, []string{"amqp://live:5672", "amqp://backup:5672"}, h.fb.dialed())
	lost := h.ev.wait(t, EventConsumerLost)
	assert.Equal(t, "orders", lost.Address)
	var ce *amqp.ConnError
	assert.ErrorAs(t, lost.Err, &ce)
	backoff := h.ev.wait(t, EventBackoff)
	assert.Equal(t, 1, backoff.Attempt)
	assert.Equal(t, 90*time.Millisecond, backoff.Delay)
	reconnected := h.ev.wait(t, EventReconnected)
	assert.Equal(t, "amqp://backup:5672", reconnected.URL)
	resumed := h.ev.wait(t, EventConsumerResumed)
	assert.Equal(t, "orders", resumed.Address)

	assert.Equal(t, []ConnectionEventKind{
		EventConnected, EventSenderAttached, EventConsumerAttached,
		EventConsumerLost, EventBackoff, EventReconnected, EventSenderReattached, EventConsumerResumed,
	}, h.ev.kinds())

	run.cancel()
	require.NoError(t, run.wait(t))
}

func TestConsumeReattachesALostLinkWithoutRedialing(t *testing.T) {
	h, attached := liveHarness(t)
	require.NoError(t, h.dial())
	run := startConsume(h, "orders", mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}))

	r1 := attachedReceiver(t, attached)
	r1.Fail(&amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondDetachForced}})
	r2 := attachedReceiver(t, attached)
	assert.NotSame(t, r1, r2)
	assert.True(t, r1.Closed())
	assert.Equal(t, 1, h.fb.connCount(), "the connection survived the link")
	assert.Len(t, h.fb.conn(0).sendersTo("orders.dlq"), 1, "the dead-letter link is still good")

	run.cancel()
	require.NoError(t, run.wait(t))
}

func TestConsumeBackoffGrowsAndCaps(t *testing.T) {
	h := newHarness(t, []string{"amqp://live:5672"},
		&ClientOptions{Backoff: &Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}},
		func(fb *fakeBroker) {
			fb.setup = func(c *fakeConn) {
				c.attachErr = func(_ string, receiver bool) error {
					if receiver {
						return &amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondNotFound, Description: "queue orders does not exist"}}
					}
					return nil
				}
			}
		})
	require.NoError(t, h.dial())
	run := startConsume(h, "orders", mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}))

	want := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}
	for i, w := range want {
		assert.Equal(t, w*time.Millisecond, h.timers.next(t), "wait %d", i+1)
	}
	run.cancel()
	require.NoError(t, run.wait(t))
	backoff := h.ev.wait(t, EventBackoff)
	assert.Contains(t, backoff.Err.Error(), "attach receiver to orders")
	assert.Contains(t, backoff.Err.Error(), "does not exist")
	assert.Equal(t, 1, h.fb.connCount(), "a refused attach does not cost the connection")
}

func TestConsumeBackoffWhileTheBrokerIsDown(t *testing.T) {
	h := newHarness(t, []string{"amqp://live:5672", "amqp://backup:5672"},
		&ClientOptions{Backoff: &Backoff{Initial: time.Second, Max: 4 * time.Second, Multiplier: 3, Jitter: 0.5}},
		func(fb *fakeBroker) {
			fb.dialErr = func(n int, _ *broker) error {
				if n > 1 {
					return refused
				}
				return nil
			}
		})
	require.NoError(t, h.dial())
	h.fb.conn(0).kill(&amqp.ConnError{})
	h.ev.wait(t, EventDisconnected)
	run := startConsume(h, "orders", mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}))

	// random 0.5, jitter 0.5: three quarters of 1s, 3s, then the 4s cap.
	for i, w := range []time.Duration{750 * time.Millisecond, 2250 * time.Millisecond, 3 * time.Second, 3 * time.Second} {
		assert.Equal(t, w, h.timers.next(t), "wait %d", i+1)
	}
	run.cancel()
	require.NoError(t, run.wait(t))
	assert.GreaterOrEqual(t, len(h.fb.dialed()), 1+2*4, "both URLs are tried on every attempt")
	backoff := h.ev.wait(t, EventBackoff)
	assert.ErrorIs(t, backoff.Err, ErrConnect)
}

// doublingBackoff is Client options whose backoff starts at 100 ms and
// doubles up to 30 s.
func doublingBackoff() *ClientOptions {
	return &ClientOptions{Backoff: &Backoff{Initial: 100 * time.Millisecond, Max: 30 * time.Second, Multiplier: 2}}
}

// flappingHarness is a harness with doublingBackoff whose connections
// first get setup (when not nil), then hand each attached receiver to
// onAttach, which ends it.
func flappingHarness(t *testing.T, setup func(*fakeConn), onAttach func(*fakelink.Receiver)) *harness {
	t.Helper()
	return newHarness(t, []string{"amqp://live:5672"}, doublingBackoff(), func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) {
			if setup != nil {
				setup(c)
			}
			c.attached = make(chan *fakelink.Receiver, 64)
			go func() {
				for r := range c.attached {
					onAttach(r)
				}
			}()
		}
	})
}

// assertConsumeWaits dials h, consumes "orders" and asserts the consumer's
// backoff waits are want (in milliseconds), then stops the Consume and the
// fake broker's loop over its attachments.
func assertConsumeWaits(t *testing.T, h *harness, want []time.Duration) {
	t.Helper()
	require.NoError(t, h.dial())
	run := startConsume(h, "orders", mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}))
	for i, w := range want {
		assert.Equal(t, w*time.Millisecond, h.timers.next(t), "wait %d", i+1)
	}
	run.cancel()
	require.NoError(t, run.wait(t))
	close(h.fb.conn(0).attached)
}

func TestConsumeBackoffResetsAfterALongAttachment(t *testing.T) {
	cases := []struct {
		name   string
		uptime time.Duration
		want   []time.Duration
	}{
		{"flapping link: keeps growing", time.Second, []time.Duration{100, 200, 400, 800}},
		{"attachment lived Backoff.Max: starts over", 30 * time.Second, []time.Duration{100, 100, 100, 100}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := flappingHarness(t, nil, func(r *fakelink.Receiver) {
				r.Fail(&amqp.LinkError{}) // every attachment dies at once
			})
			var mu sync.Mutex
			clock := time.Unix(0, 0)
			h.b.now = func() time.Time {
				// Each reading is uptime later: Listen appears to run that long.
				mu.Lock()
				defer mu.Unlock()
				clock = clock.Add(tc.uptime)
				return clock
			}
			assertConsumeWaits(t, h, tc.want)
		})
	}
}

func TestConsumeReturnsPromptlyWhenCancelledDuringBackoff(t *testing.T) {
	h := newHarness(t, []string{"amqp://live:5672"}, nil, refuseReceivers)
	h.timers.hold = true // the backoff never ends by itself
	require.NoError(t, h.dial())
	run := startConsume(h, "orders", mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}))
	assert.Equal(t, 90*time.Millisecond, h.timers.next(t))
	run.cancel()
	assert.NoError(t, run.wait(t), "a cancelled context is a normal end")
}

func TestConsumeReturnsErrClosedWhenTheClientCloses(t *testing.T) {
	t.Run("during backoff", func(t *testing.T) {
		h := newHarness(t, []string{"amqp://live:5672"}, nil, refuseReceivers)
		h.timers.hold = true
		require.NoError(t, h.dial())
		run := startConsume(h, "orders", mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}))
		h.timers.next(t)
		require.NoError(t, h.c.Close(context.Background()))
		assert.ErrorIs(t, run.wait(t), ErrClosed)
	})
	t.Run("while listening", func(t *testing.T) {
		h, attached := liveHarness(t)
		require.NoError(t, h.dial())
		run := startConsume(h, "orders", mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}))
		attachedReceiver(t, attached)
		require.NoError(t, h.c.Close(context.Background()))
		assert.ErrorIs(t, run.wait(t), ErrClosed)
		assert.NotContains(t, h.ev.kinds(), EventConsumerLost, "a deliberate close is not a loss")
	})
}

func TestConsumeRejectsInvalidArguments(t *testing.T) {
	h := newHarness(t, []string{"amqp://live:5672"}, nil, nil)
	require.NoError(t, h.dial())
	ok := mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)})
	cases := map[string]struct {
		queue string
		cons  *Consumer
	}{
		"nil consumer":     {"orders", nil},
		"invalid consumer": {"orders", newConsumer(Handlers{urnCreated: nil}, nil)},
		"blank queue":      {" ", ok},
		"negative credit":  {"orders", newConsumer(Handlers{urnCreated: newHandled().handler(nil)}, []ConsumerOption{WithCredit(-1)})},
		// Its dead-letter queue, "b::c.dlq", Artemis reads as queue
		// c.dlq on address b; "a::" has no queue to name one after.
		"a queue part holding \"::\"":           {"a::b::c", ok},
		"a blank queue part":                    {"a::", ok},
		"WithQueue's queue part holding \"::\"": {"orders", newConsumer(Handlers{urnCreated: newHandled().handler(nil)}, []ConsumerOption{WithQueue("a::b::c")})},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // a Consume that runs ends
			defer cancel()
			err := h.c.Consume(ctx, tc.queue, tc.cons)
			assert.ErrorIs(t, err, ErrInvalidConfig)
		})
	}
	assert.Empty(t, h.fb.conn(0).receiverList(), "nothing was attached")
}

func TestConsumeKeepsTheConsumersOwnDeadLetterSender(t *testing.T) {
	cases := map[string]struct {
		cons *Consumer
	}{
		"own sender":     {mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}, WithDeadLetterSender(&fakelink.Sender{}))},
		"no dead letter": {mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}, WithoutDeadLetter())},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h, attached := liveHarness(t)
			require.NoError(t, h.dial())
			run := startConsume(h, "orders", tc.cons)
			attachedReceiver(t, attached)
			assert.Empty(t, h.fb.conn(0).sendersTo("orders.dlq"))
			run.cancel()
			require.NoError(t, run.wait(t))
		})
	}
}

func TestConsumeDeadLettersToTheConsumersQueue(t *testing.T) {
	h, attached := liveHarness(t)
	require.NoError(t, h.dial())
	cons := mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}, WithQueue("billing"))
	run := startConsume(h, "billing.v2", cons)
	r := attachedReceiver(t, attached)
	assert.Equal(t, "billing.v2", r.Address())
	// The dead-letter sender attaches after the receiver, before the event.
	h.ev.wait(t, EventConsumerAttached)
	assert.Len(t, h.fb.conn(0).sendersTo("billing.dlq"), 1, "<queue>.dlq of the Consumer's WithQueue name")
	run.cancel()
	require.NoError(t, run.wait(t))
}

func TestConsumeRetriesARefusedDeadLetterAddress(t *testing.T) {
	attached := make(chan *fakelink.Receiver, 8)
	refusals := 2
	h := newHarness(t, []string{"amqp://live:5672"}, nil, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) {
			c.attached = attached
			c.attachErr = func(addr string, _ bool) error {
				if addr == "orders.dlq" && refusals > 0 {
					refusals--
					return &amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondUnauthorizedAccess}}
				}
				return nil
			}
		}
	})
	require.NoError(t, h.dial())
	run := startConsume(h, "orders", mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}))
	r1 := attachedReceiver(t, attached)
	r2 := attachedReceiver(t, attached)
	r3 := attachedReceiver(t, attached)
	assert.Equal(t, 90*time.Millisecond, h.timers.next(t))
	assert.Equal(t, 180*time.Millisecond, h.timers.next(t))
	h.ev.wait(t, EventConsumerAttached)
	assert.True(t, r1.Closed(), "a receiver whose dead-letter sender was refused is closed")
	assert.True(t, r2.Closed())
	assert.False(t, r3.Closed())
	run.cancel()
	require.NoError(t, run.wait(t))
}

func TestConsumeLetsHandlersInFlightFinishOnCancel(t *testing.T) {
	attached := make(chan *fakelink.Receiver, 8)
	msg := orderMessage(t, 0)
	h := newHarness(t, []string{"amqp://live:5672"}, nil, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) {
			c.attached = attached
			c.deliveries = func() []*amqp.Message { return []*amqp.Message{msg} }
		}
	})
	require.NoError(t, h.dial())
	inHandler, release := make(chan struct{}), make(chan struct{})
	cons := mustConsumer(t, Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error {
		close(inHandler)
		<-release
		return nil
	}})
	run := startConsume(h, "orders", cons)
	r := attachedReceiver(t, attached)
	<-inHandler
	run.cancel()
	close(release)
	require.NoError(t, run.wait(t))
	d, ok := r.Disposition(msg)
	require.True(t, ok)
	assert.Equal(t, fakelink.Accepted, d, "the handler in flight settled before Consume returned")
	assert.True(t, r.Closed())
}

// Once the Client knows its connection is dead (here: dropped, as after
// outcome timeouts), Consume's Listen starts no handler for the deliveries
// its receiver still holds: they are not replayed into handlers, only the
// one in a handler at the loss finishes.
func TestConsumeStartsNoHandlerAfterTheClientDropsTheConnection(t *testing.T) {
	msgs := []*amqp.Message{orderMessage(t, 0), orderMessage(t, 0), orderMessage(t, 0)}
	attached := make(chan *fakelink.Receiver, 8)
	h := newHarness(t, []string{"amqp://live:5672"}, nil, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) {
			c.attached = attached
			if fb.connCount() == 1 {
				c.deliveries = func() []*amqp.Message { return msgs }
			}
		}
	})
	require.NoError(t, h.dial())
	inHandler, release := make(chan string, 3), make(chan struct{})
	var calls atomic.Int32
	cons := mustConsumer(t, Handlers{urnCreated: func(_ context.Context, env *Envelope, _ *amqp.Message) error {
		calls.Add(1)
		inHandler <- env.Meta.ID
		<-release
		return nil
	}})
	run := startConsume(h, "orders", cons)
	r1 := attachedReceiver(t, attached)
	first := <-inHandler

	cn, err := h.b.connection(context.Background())
	require.NoError(t, err)
	h.b.drop(cn, &amqp.ConnError{})
	close(release)

	r2 := attachedReceiver(t, attached)
	assert.NotSame(t, r1, r2, "Consume re-attached on a new connection")
	assert.Equal(t, messageID(msgs[0]), first)
	assert.Equal(t, int32(1), calls.Load(), "no handler ran for the deliveries held after the loss")
	for _, m := range msgs[1:] {
		d, ok := r1.Disposition(m)
		if ok {
			assert.NotEqual(t, fakelink.Accepted, d, "a delivery after the loss was never handled")
		}
	}
	run.cancel()
	require.NoError(t, run.wait(t))
}

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
			var setup func(*fakeConn)
			if tc.deliver {
				setup = func(c *fakeConn) {
					c.deliveries = func() []*amqp.Message { return []*amqp.Message{orderMessage(t, 0)} }
				}
			}
			h := flappingHarness(t, setup, func(r *fakelink.Receiver) {
				go func() {
					if tc.deliver {
						// Handled and settled, then the link drops.
						_ = r.WaitSettled(context.Background(), 1)
					}
					r.Fail(&amqp.LinkError{})
				}()
			})
			assertConsumeWaits(t, h, tc.want)
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
	run := startConsume(h, "orders", mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}))
	attachedReceiver(t, attached)
	h.ev.wait(t, EventConsumerAttached)

	h.fb.conn(0).kill(&amqp.ConnError{})
	h.ev.wait(t, EventConsumerLost)
	assert.Equal(t, 90*time.Millisecond, h.timers.next(t), "the consumer waits its backoff")

	// A publish re-dials meanwhile: the consumer's wait is over.
	_, err = p.Publish(context.Background(), Job(urnCreated, orderData))
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
	run := startConsume(h, "orders", mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}))
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
	_, err := h.b.connection(context.Background())
	require.NoError(t, err)
	r1.Fail(&amqp.ConnError{})

	attachedReceiver(t, attached)
	resumed := h.ev.wait(t, EventConsumerResumed)
	assert.Equal(t, "amqp://backup:5672", resumed.URL, "the consumer took the connection that was back")
	assert.Equal(t, 2, h.fb.connCount(), "the consumer dialled nothing of its own")
	run.cancel()
	require.NoError(t, run.wait(t))
}

// A connection the Client dropped while its close hangs (a half-open
// network): the consumer's backoff ends when it is re-dialled, as it does
// for a connection that died, and its dead-letter sender leaves it too.
func TestConsumeBackoffEndsWhenADroppedConnectionIsRedialled(t *testing.T) {
	attached := make(chan *fakelink.Receiver, 8)
	h := slowCloseHarness(t, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) { c.attached = attached }
	})
	h.timers.hold = true // the consumer's backoff would never end by itself
	p, err := h.c.Publisher(context.Background(), "orders")
	require.NoError(t, err)
	run := startConsume(h, "orders", mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}))
	attachedReceiver(t, attached)
	h.ev.wait(t, EventConsumerAttached)

	cn, err := h.b.connection(context.Background())
	require.NoError(t, err)
	h.b.drop(cn, errors.New("taken for dead"))
	h.ev.wait(t, EventConsumerLost)
	require.False(t, h.fb.conn(0).dead(), "its close still hangs")
	assert.Equal(t, 90*time.Millisecond, h.timers.next(t), "the consumer waits its backoff")

	_, err = p.Publish(context.Background(), Job(urnCreated, orderData))
	require.NoError(t, err)
	attachedReceiver(t, attached)
	resumed := h.ev.wait(t, EventConsumerResumed)
	assert.Equal(t, "amqp://backup:5672", resumed.URL)
	assert.Equal(t, 2, h.fb.connCount())
	assert.Len(t, h.fb.conn(1).sendersTo("orders.dlq"), 1, "the dead-letter sender re-attached on the new connection")

	run.cancel()
	require.NoError(t, run.wait(t))
}

// TestConsumeAbandonsAFailedAttemptThroughTheClient: under Client.Consume a
// failed attempt is modified (delivery-failed) on the receiver the Client
// attached, the settlement counts as one (the receiver's wrapper passes the
// modify through), and with no WithQueue the events name the receiver's
// address.
func TestConsumeAbandonsAFailedAttemptThroughTheClient(t *testing.T) {
	h, attached := liveHarness(t)
	require.NoError(t, h.dial())
	obs := &observed{}
	seen := newHandled()
	var logs fakelink.LogBuffer
	cons := mustConsumer(t, Handlers{urnCreated: seen.handler(errors.New("gateway down"))}, WithObserver(obs),
		WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), WithRetrySchedule(nil))
	run := startConsume(h, "orders.eu", cons)
	r := attachedReceiver(t, attached)
	msg := orderMessage(t, 0)
	r.Push(msg)
	seen.next(t)
	waitSettled(t, r, 1)
	// Consume returns once its handlers are done, their events and log
	// lines included.
	run.cancel()
	require.NoError(t, run.wait(t))
	d, ok := r.Disposition(msg)
	require.True(t, ok)
	assert.Equal(t, fakelink.Failed, d, "a failed attempt is modified with delivery-failed")
	evs := obs.settlements()
	require.Len(t, evs, 1)
	assert.Equal(t, "orders.eu", evs[0].Queue, "the receiver's address, through the Client's wrapper")
	assert.Equal(t, DispositionAbandoned, evs[0].Disposition)
	assert.Equal(t, KindHandlerFailed, evs[0].Kind)
	assert.Contains(t, logs.String(), `msg="handler failed, retrying" queue=orders.eu`)
}

// The Client's consumer link accounts every settlement to its credit
// window, a failed one too (the delivery is no longer held either way),
// and counts only the settlements that succeeded as the link's.
func TestCountingReceiverSettlesTheWindowEvenWhenASettlementFails(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		settle func(r *countingReceiver, m *amqp.Message) error
	}{
		{"accept", func(r *countingReceiver, m *amqp.Message) error { return r.AcceptMessage(ctx, m) }},
		{"release", func(r *countingReceiver, m *amqp.Message) error { return r.ReleaseMessage(ctx, m) }},
		{"modify", func(r *countingReceiver, m *amqp.Message) error {
			return r.ModifyMessage(ctx, m, &amqp.ModifyMessageOptions{DeliveryFailed: true})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fr := fakelink.NewReceiver(t, "orders", orderMessage(t, 0), orderMessage(t, 0))
			w := newCreditWindow(fr.IssueCredit, 100, DefaultCreditBytes)
			require.NoError(t, w.start())
			r := &countingReceiver{linkReceiver: fr, w: w}

			m, err := r.Receive(ctx, nil)
			require.NoError(t, err)
			fr.SetSettleErr(errors.New("link detached"))
			require.Error(t, tc.settle(r, m))
			w.mu.Lock()
			held := w.held
			w.mu.Unlock()
			assert.Zero(t, held, "the failed settlement still freed its place in the window")
			assert.False(t, r.settled.Load(), "a failed settlement is not the link's")

			fr.SetSettleErr(nil)
			m, err = r.Receive(ctx, nil)
			require.NoError(t, err)
			require.NoError(t, tc.settle(r, m))
			w.mu.Lock()
			held = w.held
			w.mu.Unlock()
			assert.Zero(t, held)
			assert.True(t, r.settled.Load(), "a settlement that succeeded is the link's")
		})
	}
}
