package artemis

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

var retryNow = time.UnixMilli(1_749_132_800_000)

// retryConsumer fails every attempt, retries on the fake sender after
// delay, dead-letters on dlq, and reads its clock at retryNow.
func retryConsumer(t *testing.T, retry, dlq *fakelink.Sender, delay time.Duration, opts ...ConsumerOption) (*Consumer, *recorder, *observed, *atomic.Int32) {
	t.Helper()
	rec, obs := newRecorder(), &observed{}
	calls := new(atomic.Int32)
	seen := func(context.Context, *Envelope, *amqp.Message) error {
		calls.Add(1)
		return errors.New("gateway down")
	}
	all := []ConsumerOption{WithOnError(rec.onError), WithObserver(obs), WithDeadLetterSender(dlq),
		WithRetrySender(retry), WithRetrySchedule(func(int) time.Duration { return delay })}
	c := mustConsumer(t, Handlers{urnCreated: seen}, append(all, opts...)...)
	c.now = func() time.Time { return retryNow }
	return c, rec, obs, calls
}

func TestAFailedAttemptIsAScheduledCopyConfirmedBeforeTheAccept(t *testing.T) {
	retry, dlq := &fakelink.Sender{}, &fakelink.Sender{}
	r := fakelink.NewReceiver(t, "orders")
	src := orderMessage(t, 0, WithGroupID("tenant-7"), WithPriority(7), WithDuplicateDetection(),
		WithHeaders(map[string]string{"traceparent": "00-abc-def-01"}))
	settledFirst := false
	retry.Outcome = func(ctx context.Context, m *amqp.Message) (amqp.DeliveryState, error) {
		_, settledFirst = r.Disposition(src)
		return fakelink.Accept(ctx, m)
	}
	c, rec, obs, calls := retryConsumer(t, retry, dlq, 10*time.Second)
	r.Track(src)
	err := c.Handle(context.Background(), r, src)
	require.ErrorIs(t, err, ErrHandlerFailed)
	assert.False(t, settledFirst, "the copy is confirmed before the source is settled")
	d, ok := r.Disposition(src)
	require.True(t, ok)
	assert.Equal(t, fakelink.Accepted, d, "the source is accepted once the copy is")
	assert.Equal(t, int32(1), calls.Load())
	assert.Empty(t, dlq.Kept())

	kept := retry.Kept()
	require.Len(t, kept, 1)
	cp := kept[0]
	env, err := Decode([]byte(cp.Value.(string)))
	require.NoError(t, err)
	assert.Equal(t, 1, env.Attempts, "the body carries the next attempt")
	assert.Equal(t, "1", cp.ApplicationProperties[PropAttempts])
	assert.Equal(t, retryNow.Add(10*time.Second).UnixMilli(), cp.Annotations[AnnotationDeliveryTime])
	assert.Equal(t, urnCreated, cp.Annotations[AnnotationJMSType])
	assert.Equal(t, src.Properties.MessageID, cp.Properties.MessageID, "meta.id is the message's")
	assert.Equal(t, "tenant-7", *cp.Properties.GroupID)
	assert.Equal(t, uint8(7), cp.Header.Priority)
	assert.True(t, cp.Header.Durable)
	assert.Equal(t, "00-abc-def-01", cp.ApplicationProperties["traceparent"])
	assert.NotContains(t, cp.ApplicationProperties, PropDuplicateID, "never the source's duplicate id")
	assert.Equal(t, "orders", *cp.Properties.To)

	// The copy is the canonical re-encode with attempts + 1, nothing else.
	srcEnv, err := Decode([]byte(src.Value.(string)))
	require.NoError(t, err)
	srcEnv.Attempts = 1
	want, err := srcEnv.Encode()
	require.NoError(t, err)
	assert.Equal(t, string(want), cp.Value)

	reps := rec.all()
	require.Len(t, reps, 1)
	var de *DeliveryError
	require.ErrorAs(t, reps[0].err, &de)
	assert.Equal(t, DispositionScheduled, de.Disposition)
	evs := obs.settlements()
	require.Len(t, evs, 1)
	assert.Equal(t, DispositionScheduled, evs[0].Disposition)
	assert.Equal(t, KindHandlerFailed, evs[0].Kind)
	assert.Equal(t, 10*time.Second, evs[0].RetryDelay)
	assert.Equal(t, 0, evs[0].Attempts)
}

func TestARetryCopyKeepsTheAbsoluteExpiry(t *testing.T) {
	retry := &fakelink.Sender{}
	c, _, _, _ := retryConsumer(t, retry, &fakelink.Sender{}, 5*time.Second)
	src := orderMessage(t, 0, WithTTL(time.Minute))
	exp := *src.Properties.AbsoluteExpiryTime
	r := fakelink.NewReceiver(t, "orders")
	r.Track(src)
	_ = c.Handle(context.Background(), r, src)
	require.Len(t, retry.Kept(), 1)
	cp := retry.Kept()[0]
	require.NotNil(t, cp.Properties.AbsoluteExpiryTime)
	assert.True(t, exp.Equal(*cp.Properties.AbsoluteExpiryTime), "the message expires when its producer said")
	assert.Equal(t, exp.Sub(retryNow).Truncate(time.Millisecond), cp.Header.TTL)

	// Already past it: the copy still goes (the broker expires it), with 1ms.
	c.now = func() time.Time { return exp.Add(time.Hour) }
	src2 := orderMessage(t, 0, WithTTL(time.Minute))
	r.Track(src2)
	_ = c.Handle(context.Background(), r, src2)
	require.Len(t, retry.Kept(), 2)
	assert.Equal(t, time.Millisecond, retry.Kept()[1].Header.TTL)
}

func TestAFailedRetryCopyRetriesTheSourceAtOnceAfterTheHold(t *testing.T) {
	for name, out := range map[string]func(context.Context, *amqp.Message) (amqp.DeliveryState, error){
		"rejected": fakelink.Reject, "released": fakelink.Release, "modified": fakelink.Modify, "closed": fakelink.Closed,
	} {
		t.Run(name, func(t *testing.T) {
			retry := &fakelink.Sender{Outcome: out}
			c, rec, obs, _ := retryConsumer(t, retry, &fakelink.Sender{}, time.Second)
			held := make(chan time.Duration, 1)
			c.after = func(d time.Duration) <-chan time.Time {
				held <- d
				ch := make(chan time.Time, 1)
				ch <- time.Time{}
				return ch
			}
			o := handleOne(t, c, rec, nil, orderMessage(t, 0))
			assert.Equal(t, fakelink.Failed, o.disp, "an immediate retry: counted, not lost")
			assert.Equal(t, DefaultDeadLetterRetryDelay, <-held)
			require.Len(t, o.reports, 1)
			require.ErrorIs(t, o.reports[0].err, ErrRetryFailed)
			evs := obs.settlements()
			require.Len(t, evs, 1)
			assert.Equal(t, KindRetryFailed, evs[0].Kind)
			assert.Equal(t, DispositionAbandoned, evs[0].Disposition)
		})
	}
}

func TestImmediateRetriesAreModified(t *testing.T) {
	cases := map[string][]ConsumerOption{
		"nil schedule":      {WithRetrySchedule(nil)},
		"zero wait":         {WithRetrySchedule(func(int) time.Duration { return 0 })},
		"panicking":         {WithRetrySchedule(func(int) time.Duration { panic("bad schedule") }), WithLogger(slog.New(slog.DiscardHandler))},
		"no retry sender":   {WithRetrySender(nil)},
		"negative schedule": {WithRetrySchedule(func(int) time.Duration { return -time.Second })},
	}
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			retry := &fakelink.Sender{}
			c, rec, obs, _ := retryConsumer(t, retry, &fakelink.Sender{}, time.Minute, opts...)
			o := handleOne(t, c, rec, nil, orderMessage(t, 0))
			assert.Equal(t, fakelink.Failed, o.disp)
			assert.Empty(t, retry.Kept())
			assert.Equal(t, DispositionAbandoned, obs.settlements()[0].Disposition)
		})
	}
}

// A large message comes back with delivery-count 0 every time: the body's
// count, carried by the copies, is what reaches maxTries.
func TestScheduledCopiesCountTheAttemptsWithoutADeliveryCount(t *testing.T) {
	retry, dlq := &fakelink.Sender{}, &fakelink.Sender{}
	var seen []int
	c := mustConsumer(t, Handlers{urnCreated: func(_ context.Context, env *Envelope, _ *amqp.Message) error {
		seen = append(seen, env.Attempts)
		return errors.New("always fails")
	}}, WithDeadLetterSender(dlq), WithRetrySender(retry), WithOnError(newRecorder().onError),
		WithRetrySchedule(func(int) time.Duration { return time.Second }))
	r := fakelink.NewReceiver(t, "orders")
	msg := orderMessage(t, 0)
	for i := 0; i < 3; i++ {
		r.Track(msg)
		_ = c.Handle(context.Background(), r, msg)
		d, _ := r.Disposition(msg)
		assert.Equal(t, fakelink.Accepted, d)
		if i < 2 {
			require.Len(t, retry.Kept(), i+1)
			msg = retry.Kept()[i]
			msg.Header.DeliveryCount = 0
		}
	}
	assert.Equal(t, []int{0, 1, 2}, seen, "exactly maxTries calls, counting up")
	require.Len(t, dlq.Kept(), 1)
	assert.Equal(t, 2, dlqEnvelope(t, dlq.Kept()[0]).DeadLetter.Attempts)
	assert.NotContains(t, dlq.Kept()[0].Annotations, AnnotationDeliveryTime, "the DLQ copy is not scheduled")
}

func TestListenWarnsOfAScheduleWithoutARetrySender(t *testing.T) {
	var logs fakelink.LogBuffer
	c := mustConsumer(t, Handlers{urnCreated: succeeding}, WithRetryBackoff(DefaultRetryBackoff()),
		WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = c.Listen(ctx, fakelink.NewReceiver(t, "orders"))
	assert.Contains(t, logs.String(), "retry schedule without a retry sender")

	var quiet fakelink.LogBuffer
	c = mustConsumer(t, Handlers{urnCreated: succeeding}, WithLogger(slog.New(slog.NewTextHandler(&quiet, nil))))
	_ = c.Listen(ctx, fakelink.NewReceiver(t, "orders"))
	assert.NotContains(t, quiet.String(), "retry schedule", "the default schedule is not a warning")
}

// Immediate retries of a message the broker redelivers with delivery-count
// 0 every time (a large message on Artemis 2.40): the Consumer's memory of
// the attempts it retried keeps maxTries.
func TestImmediateRetriesCountWithoutADeliveryCount(t *testing.T) {
	dlq := &fakelink.Sender{}
	var seen []int
	c := mustConsumer(t, Handlers{urnCreated: func(_ context.Context, env *Envelope, _ *amqp.Message) error {
		seen = append(seen, env.Attempts)
		return errors.New("always fails")
	}}, WithDeadLetterSender(dlq), WithRetrySchedule(nil), WithOnError(newRecorder().onError))
	r := fakelink.NewReceiver(t, "orders")
	src := orderMessage(t, 0)
	for i := 0; i < 3; i++ {
		msg := *src // each redelivery is a delivery of its own
		r.Track(&msg)
		_ = c.Handle(context.Background(), r, &msg)
		d, _ := r.Disposition(&msg)
		if i < 2 {
			assert.Equal(t, fakelink.Failed, d)
		} else {
			assert.Equal(t, fakelink.Accepted, d)
		}
	}
	assert.Equal(t, []int{0, 1, 2}, seen)
	require.Len(t, dlq.Kept(), 1)
	assert.Zero(t, c.memory.n.Load(), "forgotten once dead-lettered")
}

func TestAPanickingScheduleRetriesAtOnceAndIsLogged(t *testing.T) {
	var logs fakelink.LogBuffer
	retry := &fakelink.Sender{}
	c, rec, _, _ := retryConsumer(t, retry, &fakelink.Sender{}, time.Minute,
		WithRetrySchedule(func(int) time.Duration { panic("bad schedule") }), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	o := handleOne(t, c, rec, nil, orderMessage(t, 0))
	assert.Equal(t, fakelink.Failed, o.disp)
	assert.Empty(t, retry.Kept())
	assert.Contains(t, logs.String(), `msg="retry schedule panicked" panic="bad schedule"`)
}

// A retry copy the broker never takes (a full queue under
// address-full-policy FAIL, no permission to send to the queue, a member
// that refuses the retry link) must not make the failing message loop for
// ever: the failed attempt still counts, and the message reaches the DLQ
// after maxTries handler calls. Each redelivery here is what Artemis does:
// delivery-count + 1 after a delivery-failed modified, unchanged after a
// plain release (0 throughout for a large message).
func TestARetryCopyThatIsNeverTakenStillEndsOnTheDLQ(t *testing.T) {
	for _, large := range []bool{false, true} {
		t.Run(map[bool]string{false: "small", true: "large"}[large], func(t *testing.T) {
			retry, dlq := &fakelink.Sender{Outcome: fakelink.Reject}, &fakelink.Sender{}
			c, _, _, calls := retryConsumer(t, retry, dlq, time.Second)
			c.after = func(time.Duration) <-chan time.Time {
				ch := make(chan time.Time, 1)
				ch <- time.Time{}
				return ch
			}
			r := fakelink.NewReceiver(t, "orders")
			src := orderMessage(t, 0)
			var count uint32
			for i := 0; i < 10; i++ {
				msg := *src // each redelivery is a delivery of its own
				h := *src.Header
				h.DeliveryCount = count
				msg.Header = &h
				r.Track(&msg)
				_ = c.Handle(context.Background(), r, &msg)
				d, ok := r.Disposition(&msg)
				require.True(t, ok, "delivery %d was not settled", i)
				if d == fakelink.Accepted {
					break
				}
				if d.DeliveryFailed && !large {
					count++
				}
			}
			assert.Equal(t, int32(3), calls.Load(), "maxTries handler calls, not one per uncounted release")
			require.Len(t, dlq.Kept(), 1, "dead-lettered at the limit")
			assert.Equal(t, 2, dlqEnvelope(t, dlq.Kept()[0]).DeadLetter.Attempts)
		})
	}
}

// A message moved back to its queue with its dead_letter block (by hand,
// or by a tool that does not remove it) that fails again: the block is
// only ever on a dead-letter queue (CONTRACT section 1), so its next
// attempt on the queue carries none; everything else, unknown keys
// included, rides along.
func TestARetryCopyCarriesNoDeadLetterBlock(t *testing.T) {
	retry := &fakelink.Sender{}
	c, _, _, _ := retryConsumer(t, retry, &fakelink.Sender{}, time.Second)
	body := `{"job":"` + urnCreated + `","trace_id":"` + testTrace + `","data":{"order_id":1042},` +
		`"meta":{"schema_version":1,"id":"m-1","lang":"python","created_at":1749132700000},"attempts":0,"x_kept":[1,2],` +
		`"dead_letter":{"reason":"failed","error":"earlier","exception":null,"failed_at":1749132730000,"original_queue":"orders","attempts":2,"lang":"python"}}`
	src := orderMessage(t, 0)
	src.Value = body
	o := handleOne(t, c, newRecorder(), nil, src)
	require.Equal(t, fakelink.Accepted, o.disp)
	require.Len(t, retry.Kept(), 1)
	cp := retry.Kept()[0].Value.(string)
	env, err := Decode([]byte(cp))
	require.NoError(t, err)
	assert.Nil(t, env.DeadLetter, "the next attempt on the queue carries no dead_letter block: %s", cp)
	assert.NotContains(t, cp, "dead_letter")
	assert.Contains(t, cp, `"x_kept":[1,2]`, "unknown keys kept")
	assert.Equal(t, 1, env.Attempts)
}

// The copy confirmed, then the source's accept fails (the link dropped in
// between): the delivery is reported unsettled (the broker redelivers it,
// and the copy comes at its time: the documented second chain), and the
// observer hears no scheduled wait for a delivery that was not scheduled.
func TestARetryCopyWhoseAcceptFailsIsReportedUnsettled(t *testing.T) {
	retry := &fakelink.Sender{}
	c, rec, obs, _ := retryConsumer(t, retry, &fakelink.Sender{}, 10*time.Second)
	r := fakelink.NewReceiver(t, "orders")
	r.SetSettleErr(&amqp.LinkError{})
	src := r.Track(orderMessage(t, 0))
	err := c.Handle(context.Background(), r, src)
	require.ErrorIs(t, err, ErrSettlement)
	require.ErrorIs(t, err, ErrHandlerFailed)
	assert.Len(t, retry.Kept(), 1, "the copy was written before the accept")
	evs := obs.settlements()
	require.Len(t, evs, 1)
	assert.Equal(t, DispositionPending, evs[0].Disposition)
	assert.Equal(t, KindSettlement, evs[0].Kind)
	assert.Zero(t, evs[0].RetryDelay, "RetryDelay is a scheduled retry's wait; this one's source was not settled")
	var de *DeliveryError
	reps := rec.all()
	require.NotEmpty(t, reps)
	require.ErrorAs(t, reps[0].err, &de)
	assert.Equal(t, DispositionPending, de.Disposition)
}

// The warning Listen writes before receiving goes through a logger whose
// handler may panic: Listen still runs (here: returns with its ended ctx).
func TestListenSurvivesAPanickingLoggerOnItsScheduleWarning(t *testing.T) {
	c := mustConsumer(t, Handlers{urnCreated: succeeding}, WithRetryBackoff(DefaultRetryBackoff()),
		WithLogger(slog.New(exitingHandler{panics: true})))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.NotPanics(t, func() { _ = c.Listen(ctx, fakelink.NewReceiver(t, "orders")) })
}
