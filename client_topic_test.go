package artemis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

func startSubscribe(h *harness, topic, sub string, cons *Consumer) *consumeRun {
	ctx, cancel := context.WithCancel(context.Background())
	run := &consumeRun{cancel: cancel, done: make(chan error, 1)}
	go func() { run.done <- h.c.Subscribe(ctx, topic, sub, cons) }()
	h.t.Cleanup(func() {
		cancel()
		if err := <-run.done; err != nil && !errors.Is(err, ErrClosed) {
			h.t.Errorf("Subscribe ended with %v", err)
		}
	})
	return run
}

func TestTopicPublisherAttachesWithTheTopicCapability(t *testing.T) {
	h := newHarness(t, []string{"amqp://live:5672"}, nil, nil)
	require.NoError(t, h.dial())
	p, err := h.c.TopicPublisher(context.Background(), "orders.events")
	require.NoError(t, err)
	_, err = p.Publish(context.Background(), Job(urnCreated, map[string]any{"id": 1}))
	require.NoError(t, err)
	snd := h.fb.conn(0).sendersTo("orders.events")
	require.Len(t, snd, 1)
	assert.Equal(t, []string{"topic"}, snd[0].Options.TargetCapabilities, "a multicast address")
	kept := h.keptOn("orders.events")
	require.Len(t, kept, 1)
	assert.Contains(t, kept[0].Value, `"queue":"orders.events"`)
	require.NoError(t, p.Close(context.Background()))

	q, err := h.c.Publisher(context.Background(), "orders")
	require.NoError(t, err)
	assert.Equal(t, []string{"queue"}, h.fb.conn(0).sendersTo("orders")[0].Options.TargetCapabilities, "a queue publisher is unchanged")
	require.NoError(t, q.Close(context.Background()))
}

func TestSubscribeConsumesTheSubscriptionQueueAndDeadLettersToItsOwnQueue(t *testing.T) {
	for name, opts := range map[string][]ConsumerOption{
		"no queue option": nil,
		// A WithQueue name would send a redrive to the wrong queue: the
		// subscription's address::queue wins.
		"a queue option": {WithQueue("billing")},
	} {
		t.Run(name, func(t *testing.T) {
			h, attached := liveHarness(t)
			require.NoError(t, h.dial())
			seen := newHandled()
			cons := mustConsumer(t, Handlers{urnCreated: seen.handler(errors.New("ledger down"))}, append(opts, WithMaxTries(1))...)
			run := startSubscribe(h, "orders.events", "billing", cons)

			r := attachedReceiver(t, attached)
			assert.Equal(t, "orders.events::billing", r.Address(), "the subscription queue, fully qualified")
			assert.Equal(t, []string{"topic"}, r.Options.SourceCapabilities)
			assert.Empty(t, r.Options.Filters)
			h.ev.wait(t, EventConsumerAttached)
			dlqs := h.fb.conn(0).sendersTo("billing.dlq")
			require.Len(t, dlqs, 1, "the subscription's own dead-letter queue")
			assert.Equal(t, []string{"queue"}, dlqs[0].Options.TargetCapabilities, "an anycast queue")

			msg := orderMessage(t, 0)
			r.Push(msg)
			require.NoError(t, r.WaitSettled(context.Background(), 1))
			assert.Equal(t, messageID(msg), seen.next(t), "handled once, then dead-lettered")
			kept := h.keptOn("billing.dlq")
			require.Len(t, kept, 1)
			assert.Contains(t, kept[0].Value, `"original_queue":"orders.events::billing"`, "a redrive goes back to this subscription only")
			for _, wrong := range []string{"orders.events", "orders.events.dlq", "orders.events::billing.dlq"} {
				assert.Empty(t, h.keptOn(wrong), "nothing on %s", wrong)
			}
			run.cancel()
			require.NoError(t, run.wait(t))
		})
	}
}

func TestSubscribeRejectsInvalidNames(t *testing.T) {
	h := newHarness(t, []string{"amqp://live:5672"}, nil, nil)
	require.NoError(t, h.dial())
	ok := mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)})
	for name, tc := range map[string][2]string{
		"blank topic":         {" ", "billing"},
		"blank subscription":  {"orders", ""},
		"fqqn topic":          {"orders::x", "billing"},
		"fqqn subscription":   {"orders", "a::billing"},
		"topic ends with :":   {"orders:", "billing"},
		"sub starts with :":   {"orders", ":billing"},
		"topic starts with :": {":orders", "billing"},
		"sub ends with :":     {"orders", "billing:"},
		"nil consumer (next)": {"orders", "billing"},
	} {
		t.Run(name, func(t *testing.T) {
			cons := ok
			if strings.HasPrefix(name, "nil") {
				cons = nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // not refused: it would run
			defer cancel()
			err := h.c.Subscribe(ctx, tc[0], tc[1], cons)
			assert.ErrorIs(t, err, ErrInvalidConfig)
		})
	}
	for _, topic := range []string{"", "orders::billing", "orders:", ":orders"} {
		_, err := h.c.TopicPublisher(context.Background(), topic)
		assert.ErrorIs(t, err, ErrInvalidConfig, "topic %q", topic)
	}
	assert.Empty(t, h.fb.conn(0).receiverList(), "nothing was attached")
	assert.Empty(t, h.fb.conn(0).sendersTo("orders"))
}

func TestConsumeAndSubscribeSendTheSelector(t *testing.T) {
	for _, topic := range []bool{false, true} {
		h, attached := liveHarness(t)
		require.NoError(t, h.dial())
		cons := mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}, WithSelector("region = 'eu'"), WithOnlyHandledURNs())
		var run *consumeRun
		if topic {
			run = startSubscribe(h, "orders", "billing", cons)
		} else {
			run = startConsume(h, "orders", cons)
		}
		r := attachedReceiver(t, attached)
		assert.Len(t, r.Options.Filters, 1, "one selector filter (its text: TestComposeSelector)")
		run.cancel()
		require.NoError(t, run.wait(t))
	}
}

func TestConsumeRejectsABadSelectorBeforeAttaching(t *testing.T) {
	h := newHarness(t, []string{"amqp://live:5672"}, nil, nil)
	require.NoError(t, h.dial())
	ok := mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)})
	for name, sel := range map[string]string{
		"blank":          "  ",
		"open literal":   "region = 'eu",
		"open paren":     "(region = 'eu'",
		"close paren":    "region = 'eu')",
		"control char":   "region = 'e\x00u'",
		"over the limit": "a = '" + strings.Repeat("x", maxSelectorLen) + "'",
	} {
		t.Run(name, func(t *testing.T) {
			withSel := mustConsumer(t, ok.handlers, WithSelector(sel))
			err := h.c.Consume(context.Background(), "orders", withSel)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			err = h.c.Subscribe(context.Background(), "orders", "billing", withSel)
			assert.ErrorIs(t, err, ErrInvalidConfig)
		})
	}
	err := h.c.Consume(context.Background(), "orders", mustConsumer(t, Handlers{}, WithUnknownURN(UnknownURNRelease), WithOnlyHandledURNs()))
	assert.ErrorIs(t, err, ErrInvalidConfig, "no handlers: nothing would ever be delivered")
	assert.Empty(t, h.fb.conn(0).receiverList(), "nothing was attached")
}

func TestConsumeEndsOnASelectorTheBrokerRefuses(t *testing.T) {
	h := newHarness(t, []string{"amqp://live:5672"}, nil, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) {
			c.attachErr = func(_ string, receiver bool) error {
				if receiver {
					return &amqp.Error{Condition: amqp.ErrCondInvalidField, Description: "Invalid filter"}
				}
				return nil
			}
		}
	})
	require.NoError(t, h.dial())
	cons := mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}, WithSelector("region == 'eu'"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := h.c.Subscribe(ctx, "orders", "billing", cons)
	require.ErrorIs(t, err, ErrInvalidConfig, "at once, not retried until ctx ends")
	require.NoError(t, ctx.Err())
	assert.Contains(t, err.Error(), `"region == 'eu'"`)
	assert.Contains(t, err.Error(), "Invalid filter")
}

func TestDeadLetterQueueOfASubscription(t *testing.T) {
	assert.Equal(t, "orders.dlq", dlqAddress("orders"))
	assert.Equal(t, "billing.dlq", dlqAddress("orders.events::billing"), "the subscription's own, never on the topic's address")
	assert.Equal(t, "", dlqAddress(""))
}

func TestSubscribeEndsWhenTheSubscriptionHasAnotherSelector(t *testing.T) {
	// What Artemis 2.40 answers an attach whose selector differs from the
	// filter of the existing subscription queue; it closes the connection
	// with it.
	mismatch := &amqp.Error{Condition: amqp.ErrCondInternalError,
		Description: "Unrecoverable error: Queue: billing filter mismatch [region = 'us'] is different than existing filter [region = 'eu']"}
	h := newHarness(t, []string{"amqp://live:5672"}, nil, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) {
			c.attachErr = func(_ string, receiver bool) error {
				if receiver {
					return mismatch
				}
				return nil
			}
		}
	})
	require.NoError(t, h.dial())
	cons := mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}, WithSelector("region = 'us'"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := h.c.Subscribe(ctx, "orders", "billing", cons)
	require.ErrorIs(t, err, ErrInvalidConfig, "at once, not re-attached (and the connection re-dialled) until ctx ends")
	require.NoError(t, ctx.Err())
	assert.Contains(t, err.Error(), "another selector")
	assert.Contains(t, err.Error(), "filter mismatch")
}

func TestSubscribeNonDurableAttachesAsASharedVolatileSubscription(t *testing.T) {
	h, attached := liveHarness(t)
	require.NoError(t, h.dial())
	seen := newHandled()
	// The default retry schedule: a non-durable subscription retries at once
	// instead (no copy is scheduled on its queue).
	cons := mustConsumer(t, Handlers{urnCreated: seen.handler(errors.New("cache down"))}, WithMaxTries(2), WithNonDurable(), WithSelector("region = 'eu'"))
	run := startSubscribe(h, "orders.events", "live", cons)

	r := attachedReceiver(t, attached)
	h.ev.wait(t, EventConsumerAttached)
	assert.Equal(t, "orders.events", r.Address(), "the topic itself, not a queue of it")
	assert.Equal(t, []string{"topic", "shared", "global"}, r.Options.SourceCapabilities)
	assert.Equal(t, amqp.DurabilityNone, r.Options.Durability)
	assert.Equal(t, amqp.ExpiryPolicyLinkDetach, r.Options.ExpiryPolicy)
	assert.True(t, strings.HasPrefix(r.Options.Name, "live|"), "the link is named after the subscription: %q", r.Options.Name)
	assert.Greater(t, len(r.Options.Name), len("live|"), "with a suffix of its own")
	assert.Len(t, r.Options.Filters, 1, "the selector")
	const dlq = "live:shared-volatile:global.dlq"
	assert.Empty(t, h.fb.conn(0).sendersTo(dlq), "no dead-letter queue is made before a dead letter")

	msg := orderMessage(t, 0)
	r.Push(msg)
	require.NoError(t, r.WaitSettled(context.Background(), 1))
	d, _ := r.Disposition(msg)
	assert.Equal(t, fakelink.Failed, d, "the first failure is redelivered by the broker at once")
	assert.Empty(t, h.fb.conn(0).sendersTo("orders.events::live:shared-volatile:global"), "no retry copy")

	again := orderMessage(t, 0)
	again.Header = &amqp.MessageHeader{DeliveryCount: 1}
	r.Push(again)
	require.NoError(t, r.WaitSettled(context.Background(), 1))
	kept := h.keptOn(dlq)
	require.Len(t, kept, 1, "the second failure is dead-lettered to the subscription queue's .dlq")
	assert.Contains(t, kept[0].Value, `"original_queue":"orders.events::live:shared-volatile:global"`)
	run.cancel()
	require.NoError(t, run.wait(t))
}

func TestSubscribeNonDurableRefusals(t *testing.T) {
	h := newHarness(t, []string{"amqp://live:5672"}, nil, nil)
	require.NoError(t, h.dial())
	ok := mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}, WithNonDurable())

	err := h.c.Consume(context.Background(), "orders", ok)
	assert.ErrorIs(t, err, ErrInvalidConfig, "a queue is not a subscription")
	assert.Contains(t, err.Error(), "Subscribe")

	err = h.c.Subscribe(context.Background(), "orders", "live|2", ok)
	assert.ErrorIs(t, err, ErrInvalidConfig, "Artemis would cut the name at the |")

	own := &fakelink.Sender{} // a retry sender of the user's own: copies would go there
	for name, opts := range map[string][]ConsumerOption{
		"a schedule":                    {WithRetrySchedule(func(int) time.Duration { return time.Second })},
		"a backoff":                     {WithRetryBackoff(DefaultRetryBackoff())},
		"a schedule and a retry sender": {WithRetrySchedule(func(int) time.Duration { return time.Second }), WithRetrySender(own)},
		"a retry sender":                {WithRetrySender(own)},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // not refused: it would run
			defer cancel()
			err := h.c.Subscribe(ctx, "orders", "live", mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}, append(opts, WithNonDurable())...))
			assert.ErrorIs(t, err, ErrInvalidConfig, "a scheduled copy could outlive the queue")
			assert.Contains(t, err.Error(), "retries at once")
		})
	}
	assert.Empty(t, h.fb.conn(0).receiverList(), "nothing was attached")

	// Immediate retries, by choice, are taken; so is a durable subscription
	// with a schedule.
	h2, attached := liveHarness(t)
	require.NoError(t, h2.dial())
	startSubscribe(h2, "orders", "live", mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}, WithRetrySchedule(nil), WithNonDurable()))
	attachedReceiver(t, attached)
	startSubscribe(h2, "orders", "billing", mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}, WithRetryBackoff(DefaultRetryBackoff())))
	attachedReceiver(t, attached)
}
