package artemis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// observed records every event an Observer hears.
type observed struct {
	mu        sync.Mutex
	settled   []SettleEvent
	published []PublishEvent
}

func (o *observed) Settled(ev SettleEvent) {
	o.mu.Lock()
	o.settled = append(o.settled, ev)
	o.mu.Unlock()
}

func (o *observed) Published(ev PublishEvent) {
	o.mu.Lock()
	o.published = append(o.published, ev)
	o.mu.Unlock()
}

func (o *observed) settlements() []SettleEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]SettleEvent(nil), o.settled...)
}

func (o *observed) publishes() []PublishEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]PublishEvent(nil), o.published...)
}

// stepClock is a clock that moves only when told to.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func newStepClock() *stepClock { return &stepClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *stepClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *stepClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// taking is a handler that takes d on clk, then returns err.
func taking(clk *stepClock, d time.Duration, err error) HandlerFunc {
	return func(context.Context, *Envelope, *amqp.Message) error {
		clk.advance(d)
		return err
	}
}

func TestObserverHearsEverySettlement(t *testing.T) {
	boom := errors.New("boom")
	const handlerTime, dlqTime = 250 * time.Millisecond, 40 * time.Millisecond
	cases := []struct {
		name     string
		handler  func(clk *stepClock) HandlerFunc
		opts     []ConsumerOption
		dlq      func(ctx context.Context, m *amqp.Message) (amqp.DeliveryState, error) // nil: no DLQ sender
		delivery uint32
		msg      func(t *testing.T, dc uint32) *amqp.Message
		settle   error // what the receiver's settlement returns

		disp     Disposition
		kind     DeliveryKind
		cause    error // errors.Is of Err; nil: Err is nil
		decoded  bool  // MessageID is meta.id
		ran      bool  // the handler ran: Handler is handlerTime
		reported bool  // the error callback heard of it
	}{
		{name: "accepted", handler: func(clk *stepClock) HandlerFunc { return taking(clk, handlerTime, nil) },
			disp: DispositionAccepted, decoded: true, ran: true},
		{name: "handler failed, retried", handler: func(clk *stepClock) HandlerFunc { return taking(clk, handlerTime, boom) },
			disp: DispositionAbandoned, kind: KindHandlerFailed, cause: boom, decoded: true, ran: true, reported: true},
		{name: "handler failed at the limit, dead-lettered", handler: func(clk *stepClock) HandlerFunc { return taking(clk, handlerTime, boom) },
			dlq: fakelink.Accept, delivery: 2,
			disp: DispositionDeadLettered, kind: KindHandlerFailed, cause: boom, decoded: true, ran: true, reported: true},
		{name: "handler failed at the limit, no DLQ: dropped", handler: func(clk *stepClock) HandlerFunc { return taking(clk, handlerTime, boom) },
			delivery: 2,
			disp:     DispositionDropped, kind: KindHandlerFailed, cause: boom, decoded: true, ran: true, reported: true},
		{name: "dead-letter write rejected: released", handler: func(clk *stepClock) HandlerFunc { return taking(clk, handlerTime, boom) },
			dlq: fakelink.Reject, delivery: 2, opts: []ConsumerOption{WithDeadLetterRetryDelay(0)},
			disp: DispositionReleased, kind: KindDeadLetterFailed, cause: ErrNotAccepted, decoded: true, ran: true, reported: true},
		{name: "unknown URN, fail", opts: []ConsumerOption{WithUnknownURN(UnknownURNFail)},
			disp: DispositionAbandoned, kind: KindUnknownURN, reported: true, cause: errAny},
		{name: "unknown URN, release: not reported, still observed", opts: []ConsumerOption{WithUnknownURN(UnknownURNRelease)},
			disp: DispositionAbandoned, kind: KindUnknownURN},
		{name: "unknown URN, delete: not reported, still observed", opts: []ConsumerOption{WithUnknownURN(UnknownURNDelete)},
			disp: DispositionDropped, kind: KindUnknownURN},
		{name: "unknown URN, dead_letter", opts: []ConsumerOption{WithUnknownURN(UnknownURNDeadLetter)}, dlq: fakelink.Accept,
			disp: DispositionDeadLettered, kind: KindUnknownURN, decoded: true, reported: true, cause: errAny},
		{name: "poison, dead-lettered", handler: func(clk *stepClock) HandlerFunc { return taking(clk, handlerTime, nil) },
			dlq: fakelink.Accept, msg: func(*testing.T, uint32) *amqp.Message { return rawMessage("not json") },
			disp: DispositionDeadLettered, kind: KindPoison, cause: ErrInvalidEnvelope, reported: true},
		{name: "poison, no DLQ: dropped", handler: func(clk *stepClock) HandlerFunc { return taking(clk, handlerTime, nil) },
			msg:  func(*testing.T, uint32) *amqp.Message { return rawMessage("not json") },
			disp: DispositionDropped, kind: KindPoison, cause: ErrInvalidEnvelope, reported: true},
		{name: "schema version gated", handler: func(clk *stepClock) HandlerFunc { return taking(clk, handlerTime, nil) },
			dlq: fakelink.Accept, msg: func(t *testing.T, dc uint32) *amqp.Message {
				m := orderMessage(t, dc)
				m.ApplicationProperties[PropSchemaVersion] = "2"
				return m
			},
			disp: DispositionDeadLettered, kind: KindVersionGated, reported: true, cause: errAny},
		{name: "settlement failed", handler: func(clk *stepClock) HandlerFunc { return taking(clk, handlerTime, nil) },
			settle: fakelink.ErrLinkClosed,
			disp:   DispositionPending, kind: KindSettlement, cause: fakelink.ErrLinkClosed, decoded: true, ran: true, reported: true},
		{name: "handler failed and its settlement too", handler: func(clk *stepClock) HandlerFunc { return taking(clk, handlerTime, boom) },
			settle: fakelink.ErrLinkClosed,
			disp:   DispositionPending, kind: KindSettlement, cause: fakelink.ErrLinkClosed, decoded: true, ran: true, reported: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := newStepClock()
			obs := &observed{}
			reports := 0
			opts := append([]ConsumerOption{WithObserver(obs), WithQueue("orders-q"),
				WithOnError(func(context.Context, error, *Envelope, *amqp.Message) { reports++ })}, tc.opts...)
			if tc.dlq != nil {
				outcome := tc.dlq
				opts = append(opts, WithDeadLetterSender(&fakelink.Sender{Outcome: func(ctx context.Context, m *amqp.Message) (amqp.DeliveryState, error) {
					clk.advance(dlqTime)
					return outcome(ctx, m)
				}}))
			}
			handlers := Handlers{}
			if tc.handler != nil {
				handlers[urnCreated] = tc.handler(clk)
			}
			c := mustConsumer(t, handlers, opts...)
			c.now = clk.now
			msg := orderMessage(t, tc.delivery)
			if tc.msg != nil {
				msg = tc.msg(t, tc.delivery)
			}
			r := fakelink.NewReceiver(t, "orders")
			r.SettleErr = tc.settle
			r.Track(msg)
			_ = c.Handle(context.Background(), r, msg)

			evs := obs.settlements()
			require.Len(t, evs, 1, "one event per delivery")
			ev := evs[0]
			assert.Equal(t, "orders-q", ev.Queue)
			assert.Equal(t, tc.disp, ev.Disposition)
			assert.Equal(t, tc.kind, ev.Kind)
			switch {
			case tc.cause == nil:
				assert.NoError(t, ev.Err)
			case errors.Is(tc.cause, errAny):
				assert.Error(t, ev.Err)
			default:
				assert.ErrorIs(t, ev.Err, tc.cause)
			}
			assert.Equal(t, int(tc.delivery), ev.Attempts)
			if tc.msg == nil || tc.kind == KindVersionGated {
				assert.Equal(t, urnCreated, ev.URN)
			}
			if tc.decoded {
				assert.Equal(t, msg.Properties.MessageID, ev.MessageID)
			} else {
				assert.Empty(t, ev.MessageID)
			}
			want := time.Duration(0)
			if tc.ran {
				want = handlerTime
			}
			assert.Equal(t, want, ev.Handler, "handler time")
			if tc.dlq != nil && (tc.kind != KindUnknownURN || tc.disp == DispositionDeadLettered) && tc.kind != KindSettlement {
				want += dlqTime
			}
			assert.Equal(t, want, ev.Latency, "latency: the handler and the dead-letter write")
			assert.Equal(t, tc.reported, reports > 0, "reported")
		})
	}
}

// errAny stands for "some error" in the cases above.
var errAny = errors.New("any error")

func TestObserverClocksAreNotReadWithoutAnObserver(t *testing.T) {
	c := mustConsumer(t, Handlers{urnCreated: succeeding})
	c.now = func() time.Time {
		t.Error("the clock was read: no observer is set")
		return time.Now()
	}
	got := handleOne(t, c, newRecorder(), nil, orderMessage(t, 0))
	assert.Equal(t, fakelink.Accepted, got.disp)
}

func TestObserverPanicNeverChangesTheSettlement(t *testing.T) {
	var logs bytes.Buffer
	c := mustConsumer(t, Handlers{urnCreated: failing(errors.New("boom"))},
		WithObserver(panicking{}), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	got := handleOne(t, c, newRecorder(), nil, orderMessage(t, 0))
	assert.Equal(t, fakelink.Failed, got.disp)
	assert.ErrorIs(t, got.ret, ErrHandlerFailed, "Handle returns what it would without the observer")
	assert.Contains(t, logs.String(), `level=ERROR msg="settlement observer panicked" panic="observer bug"`)

	s := &fakelink.Sender{}
	p := NewPublisher(s, "orders", WithObserver(panicking{}))
	id, err := p.Publish(context.Background(), Job(urnCreated, map[string]int{"order_id": 1}))
	require.NoError(t, err, "the publish succeeds despite the observer")
	assert.NotEmpty(t, id)
	assert.Len(t, s.Kept(), 1)
}

type panicking struct{}

func (panicking) Settled(SettleEvent)    { panic("observer bug") }
func (panicking) Published(PublishEvent) { panic("observer bug") }

func TestObserverUnderConcurrentWorkers(t *testing.T) {
	const n = 200
	obs := &observed{}
	boom := errors.New("boom")
	c := mustConsumer(t, Handlers{urnCreated: func(_ context.Context, env *Envelope, _ *amqp.Message) error {
		if env.Attempts%2 == 1 {
			return boom
		}
		return nil
	}}, WithObserver(obs), WithConcurrency(8), WithOnError(func(context.Context, error, *Envelope, *amqp.Message) {}))
	r := fakelink.NewReceiver(t, "orders")
	for i := range n {
		r.Push(orderMessage(t, uint32(i%2)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Listen(ctx, r) }()
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	require.NoError(t, r.WaitSettled(wctx, n))
	cancel()
	require.NoError(t, <-done)

	counts := map[Disposition]int{}
	for _, ev := range obs.settlements() {
		counts[ev.Disposition]++
	}
	assert.Equal(t, map[Disposition]int{DispositionAccepted: n / 2, DispositionAbandoned: n / 2}, counts)
}

// outcomeUnknownSender fails every send as the Client's publisher does
// when a transfer's outcome never came.
type outcomeUnknownSender struct{}

func (outcomeUnknownSender) Send(context.Context, *amqp.Message, *amqp.SendOptions) error {
	return fmt.Errorf("%w: link detached", ErrOutcomeUnknown)
}

func TestObserverHearsEveryPublish(t *testing.T) {
	const took = 30 * time.Millisecond
	cases := []struct {
		name    string
		sender  func(clk *stepClock) Sender
		urn     string
		outcome PublishOutcome
		cause   error
		built   bool
	}{
		{name: "accepted", urn: urnCreated, outcome: PublishAccepted, built: true},
		{name: "rejected", urn: urnCreated, outcome: PublishNotAccepted, cause: ErrNotAccepted, built: true,
			sender: func(clk *stepClock) Sender { return timedSender(clk, took, fakelink.Reject) }},
		{name: "released", urn: urnCreated, outcome: PublishNotAccepted, cause: ErrNotAccepted, built: true,
			sender: func(clk *stepClock) Sender { return timedSender(clk, took, fakelink.Release) }},
		{name: "outcome unknown", urn: urnCreated, outcome: PublishUnknown, cause: ErrOutcomeUnknown, built: true,
			sender: func(*stepClock) Sender { return outcomeUnknownSender{} }},
		{name: "link closed", urn: urnCreated, outcome: PublishFailed, cause: fakelink.ErrLinkClosed, built: true,
			sender: func(clk *stepClock) Sender { return timedSender(clk, took, fakelink.Closed) }},
		{name: "no URN: no envelope", urn: "", outcome: PublishFailed, cause: ErrInvalidEnvelope},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := newStepClock()
			obs := &observed{}
			s := Sender(timedSender(clk, took, fakelink.Accept))
			if tc.sender != nil {
				s = tc.sender(clk)
			}
			p := NewPublisher(s, "orders", WithObserver(obs), publishOption(func(c *publishConfig) { c.now = clk.now }))
			id, err := p.Publish(context.Background(), Job(tc.urn, map[string]int{"order_id": 1}))

			evs := obs.publishes()
			require.Len(t, evs, 1)
			ev := evs[0]
			assert.Equal(t, "orders", ev.Queue)
			assert.Equal(t, tc.urn, ev.URN)
			assert.Equal(t, tc.outcome, ev.Outcome, "outcome %s", ev.Outcome)
			if tc.cause == nil {
				assert.NoError(t, ev.Err)
				assert.Equal(t, id, ev.MessageID)
			} else {
				assert.ErrorIs(t, ev.Err, tc.cause)
				assert.Equal(t, err, ev.Err, "the event carries the error Publish returned")
			}
			if !tc.built {
				assert.Empty(t, ev.MessageID)
				assert.Zero(t, ev.Duration)
				return
			}
			assert.NotEmpty(t, ev.MessageID)
			if _, ok := s.(outcomeUnknownSender); !ok {
				assert.Equal(t, took, ev.Duration)
			}
		})
	}
}

func TestPerCallPublishObserverReplacesThePublishers(t *testing.T) {
	first, second := &observed{}, &observed{}
	p := NewPublisher(&fakelink.Sender{}, "orders", WithObserver(first))
	_, err := p.Publish(context.Background(), Job(urnCreated, nil))
	require.NoError(t, err)
	env, err := NewEnvelope(urnCreated, nil)
	require.NoError(t, err)
	_, err = p.Publish(context.Background(), env, WithObserver(second))
	require.NoError(t, err)
	assert.Len(t, first.publishes(), 1)
	require.Len(t, second.publishes(), 1)
	assert.Equal(t, env.Meta.ID, second.publishes()[0].MessageID)
}

// timedSender is a fake broker whose every transfer takes d on clk.
func timedSender(clk *stepClock, d time.Duration, outcome func(context.Context, *amqp.Message) (amqp.DeliveryState, error)) *fakelink.Sender {
	return &fakelink.Sender{Outcome: func(ctx context.Context, m *amqp.Message) (amqp.DeliveryState, error) {
		clk.advance(d)
		return outcome(ctx, m)
	}}
}

func TestPublishOutcomeNames(t *testing.T) {
	assert.Equal(t, "accepted", PublishAccepted.String())
	assert.Equal(t, "not_accepted", PublishNotAccepted.String())
	assert.Equal(t, "unknown", PublishUnknown.String())
	assert.Equal(t, "error", PublishFailed.String())
	assert.Equal(t, "PublishOutcome(0)", PublishOutcome(0).String())
}

// TestDeliveryKinds: each kind has its label and its sentinel, a
// DeliveryError of a kind matches its sentinel and no other, and the zero
// kind (a success) has neither.
func TestDeliveryKinds(t *testing.T) {
	want := map[DeliveryKind]struct {
		name string
		err  error
	}{
		KindHandlerFailed: {"handler_failed", ErrHandlerFailed}, KindUnknownURN: {"unknown_urn", ErrUnknownURN},
		KindPoison: {"poison", ErrPoison}, KindVersionGated: {"version_gated", ErrVersionGated},
		KindDeadLetterFailed: {"dead_letter_failed", ErrDeadLetterFailed}, KindSettlement: {"settlement_failed", ErrSettlement},
		KindInvalidPayload: {"invalid_payload", ErrInvalidPayload}, KindGivenBack: {"given_back", ErrGivenBack},
		KindInvalidConfig: {"invalid_config", ErrInvalidConfig},
	}
	for kind, w := range want {
		assert.Equal(t, w.name, kind.String())
		assert.Truef(t, kind.Err() == w.err, "%s: Err is its sentinel", w.name) //nolint:errorlint // the sentinel itself
		de := &DeliveryError{Kind: kind, Err: errors.New("cause")}
		assert.ErrorIs(t, de, w.err)
		for other, o := range want {
			if other != kind {
				assert.NotErrorIsf(t, de, o.err, "%s matches only its own sentinel", w.name)
			}
		}
	}
	assert.Empty(t, KindNone.String())
	assert.NoError(t, KindNone.Err())
	assert.Equal(t, "DeliveryKind(200)", DeliveryKind(200).String())
	assert.NoError(t, DeliveryKind(200).Err())
	assert.NotErrorIs(t, &DeliveryError{}, ErrPoison, "a zero DeliveryError matches no sentinel")
	assert.Empty(t, SettleEvent{}.Kind.String(), "a success has no label")
}

// TestObserverAllocatesNothing: an event costs no allocation, on either
// path, beyond what the path allocates without an Observer.
func TestObserverAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	msg := benchDelivery(t, benchURN)
	r := fakelink.NewCountingReceiver()
	obs := &benchObserver{}
	plain := mustConsumer(t, Handlers{benchURN: benchAcceptOrder})
	observed := mustConsumer(t, Handlers{benchURN: benchAcceptOrder}, WithObserver(obs))
	handle := func(c *Consumer) func() {
		return func() {
			if err := c.Handle(ctx, r, msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Under the race detector sync.Pool drops some of what is put back at
	// random, so two measurements of the same path may differ by one.
	slack := 0.0
	if raceEnabled {
		slack = 1
	}
	base, with := testing.AllocsPerRun(200, handle(plain)), testing.AllocsPerRun(200, handle(observed))
	if with > base+slack {
		t.Errorf("Handle: %v allocations with an observer, %v without", with, base)
	}

	s := &fakelink.Sender{Discard: true}
	data := benchOrderStruct()
	publish := func(p *Publisher) func() {
		return func() {
			if _, err := p.Publish(ctx, Job(benchURN, data)); err != nil {
				t.Fatal(err)
			}
		}
	}
	base = testing.AllocsPerRun(200, publish(NewPublisher(s, benchQueue)))
	with = testing.AllocsPerRun(200, publish(NewPublisher(s, benchQueue, WithObserver(obs))))
	if with > base+slack {
		t.Errorf("Publish: %v allocations with an observer, %v without", with, base)
	}
	if obs.published.Load() == 0 || obs.byDisposition[DispositionAccepted].Load() == 0 || obs.handler.Load() < 0 ||
		time.Duration(obs.publishTime.Load()) < 0 {
		t.Fatal("the observer heard nothing")
	}
}

// TestObserverHearsEveryDispositionUnderShutdownAndLinkLoss: every
// disposition Listen sends (fakelink records each one, also when the link
// refuses it) is heard by the Observer exactly once, with its kind: the
// handled deliveries, and those Listen took but never started and gave back
// on its way out, when its context ended or its link was lost.
func TestObserverHearsEveryDispositionUnderShutdownAndLinkLoss(t *testing.T) {
	for _, stop := range []string{"shutdown", "link loss"} {
		for _, workers := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s/workers=%d", stop, workers), func(t *testing.T) {
				fr := fakelink.NewReceiver(t, "orders")
				for i := range 20 { // prefetched; two groups, so deliveries queue behind the ones in flight
					fr.Push(groupedMessage(t, fmt.Sprintf("g%d", i%2), i))
				}
				var calls atomic.Int32
				started := make(chan struct{}, 20)
				gate := make(chan struct{})
				obs := &observed{}
				c := mustConsumer(t, Handlers{urnCreated: gatedHandler(&calls, started, gate)}, WithConcurrency(workers),
					WithObserver(obs), WithOnError(func(context.Context, error, *Envelope, *amqp.Message) {}))
				done, cancel := listenInBackground(c, fr)
				defer cancel()
				for range min(workers, 2) {
					<-started
				}
				if workers > 1 {
					// The free workers take the rest, each queued behind the
					// delivery of its group in flight.
					require.Eventually(t, func() bool { return fr.Queued() == 0 }, 10*time.Second, time.Millisecond)
				}
				if stop == "shutdown" {
					cancel()
				} else {
					fr.SetSettleErr(&amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondDetachForced, Description: "cut"}})
				}
				close(gate)
				select {
				case err := <-done:
					if stop == "shutdown" {
						assert.NoError(t, err, "Listen's return after its context ended")
					} else {
						assert.Error(t, err, "Listen's return after the link was lost")
					}
				case <-time.After(20 * time.Second):
					t.Fatal("Listen did not return")
				}

				sent := map[string]int{}
				for _, d := range fr.Dispositions() {
					sent[d.Outcome]++
				}
				heard := map[string]int{}
				var givenBack int
				for _, ev := range obs.settlements() {
					switch {
					case ev.Kind == KindGivenBack:
						givenBack++
						heard["released"]++
						assert.Equal(t, DispositionReleased, ev.Disposition)
						assert.Equal(t, "given_back", ev.Kind.String())
						assert.Equal(t, "orders", ev.Queue)
						assert.Equal(t, urnCreated, ev.URN)
					case ev.Kind == KindSettlement:
						heard["refused"]++
					case ev.Disposition == DispositionAccepted:
						heard["accepted"]++
					default:
						t.Errorf("unexpected event %+v", ev)
					}
				}
				t.Logf("dispositions sent %v, events heard %v (given back %d)", sent, heard, givenBack)
				assert.Equal(t, fr.Settled(), len(obs.settlements()), "one event per disposition sent")
				if stop == "shutdown" {
					assert.Equal(t, sent["accepted"], heard["accepted"])
					assert.Equal(t, sent["released"], heard["released"])
					if workers > 1 {
						assert.Positive(t, givenBack, "deliveries queued behind the groups were given back")
					}
				} else {
					assert.Equal(t, fr.Settled(), heard["refused"], "every disposition was refused by the lost link, and heard as such")
					if workers > 1 {
						assert.Greater(t, fr.Settled(), int(calls.Load()), "deliveries never started were given back too")
					}
				}
			})
		}
	}
}
