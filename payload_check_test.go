package artemis

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConsumeInvalidPayloadIsDeadLetteredAtOnce(t *testing.T) {
	rec := newRecorder()
	dlq := &fakelink.Sender{}
	v := &orderIDValidator{}
	c := mustConsumer(t, Handlers{urnCreated: neverCalled(t)}, WithOnError(rec.onError),
		WithDeadLetterSender(dlq), WithPayloadValidator(v), WithMaxTries(5))
	got := handleOne(t, c, rec, dlq, invalidOrderMessage(t, 0))

	assert.Equal(t, fakelink.Accepted, got.disp, "the source is accepted once the copy is confirmed")
	require.Len(t, got.dlq, 1, "dead-lettered on the first delivery: no retry")
	env := dlqEnvelope(t, got.dlq[0])
	assert.JSONEq(t, `{"order_id":0}`, string(env.Data), "the record keeps the data as it came")
	dl := env.DeadLetter
	assert.Equal(t, ReasonFailed, dl.Reason)
	require.NotNil(t, dl.Error)
	assert.Equal(t, "artemis: invalid payload for urn:babel:orders:created: /order_id: must be >= 1", *dl.Error)
	require.NotNil(t, dl.Exception)
	assert.Equal(t, "*artemis.PayloadError", *dl.Exception)
	assert.Equal(t, 0, dl.Attempts)
	assert.Equal(t, "orders", dl.OriginalQueue)

	de := requireReport(t, got, ErrInvalidPayload, DispositionDeadLettered)
	var pe *PayloadError
	require.ErrorAs(t, de, &pe)
	assert.Equal(t, []PayloadViolation{{Pointer: "/order_id", Message: "must be >= 1"}}, pe.Violations)
	assert.ErrorIs(t, got.ret, ErrInvalidPayload)
	assert.NotErrorIs(t, got.ret, ErrHandlerFailed)
	assert.Equal(t, int64(1), v.calls.Load())
}

func TestConsumeInvalidPayloadWithoutDeadLetterIsDroppedAndReported(t *testing.T) {
	for _, tc := range []struct {
		name     string
		dlq      *fakelink.Sender
		strategy UnknownURNStrategy
	}{
		{"no DLQ sender", nil, UnknownURNFail},
		{"delete with a DLQ sender", &fakelink.Sender{}, UnknownURNDelete},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder()
			opts := []ConsumerOption{WithOnError(rec.onError), WithPayloadValidator(&orderIDValidator{}), WithUnknownURN(tc.strategy)}
			if tc.dlq != nil {
				opts = append(opts, WithDeadLetterSender(tc.dlq))
			}
			c := mustConsumer(t, Handlers{urnCreated: neverCalled(t)}, opts...)
			got := handleOne(t, c, rec, tc.dlq, invalidOrderMessage(t, 0))
			assert.Equal(t, fakelink.Accepted, got.disp)
			if tc.dlq != nil {
				assert.Zero(t, tc.dlq.Count(), "nothing written to the DLQ")
			}
			de := requireReport(t, got, ErrInvalidPayload, DispositionDropped)
			assert.Contains(t, de.Error(), "/order_id: must be >= 1", "the report says what was wrong")
		})
	}
}

func TestConsumeInvalidPayloadFailedDeadLetterWriteIsReleased(t *testing.T) {
	rec := newRecorder()
	dlq := &fakelink.Sender{Outcome: fakelink.Reject}
	c := mustConsumer(t, Handlers{urnCreated: neverCalled(t)}, WithOnError(rec.onError),
		WithDeadLetterSender(dlq), WithPayloadValidator(&orderIDValidator{}), WithDeadLetterRetryDelay(0))
	got := handleOne(t, c, rec, dlq, invalidOrderMessage(t, 0))
	assert.Equal(t, fakelink.Released, got.disp, "never accepted without a confirmed copy")
	de := requireReport(t, got, ErrDeadLetterFailed, DispositionReleased)
	assert.ErrorIs(t, de, ErrInvalidPayload, "the cause is still reachable")
}

func TestConsumeValidPayloadAndUncheckedURNsReachTheHandler(t *testing.T) {
	v := &orderIDValidator{}
	var handled atomic.Int64
	count := func(context.Context, *Envelope, *amqp.Message) error { handled.Add(1); return nil }
	rec := newRecorder()
	c := mustConsumer(t, Handlers{urnCreated: count, "urn:babel:orders:cancelled": count},
		WithOnError(rec.onError), WithPayloadValidator(v))

	got := handleOne(t, c, rec, nil, orderMessage(t, 0)) // {"order_id":1042}
	assert.Equal(t, fakelink.Accepted, got.disp)

	env, err := NewEnvelope("urn:babel:orders:cancelled", map[string]any{"order_id": 0})
	require.NoError(t, err)
	msg, err := NewMessage(env)
	require.NoError(t, err)
	got = handleOne(t, c, rec, nil, msg)
	assert.Equal(t, fakelink.Accepted, got.disp, "a URN without a schema is not checked")
	assert.Equal(t, int64(2), handled.Load())
	assert.Empty(t, rec.all())
	assert.Equal(t, int64(2), v.calls.Load())

	// A URN without a handler goes to the unknown-URN strategy unchecked.
	env, err = NewEnvelope("urn:babel:nobody", map[string]any{})
	require.NoError(t, err)
	msg, err = NewMessage(env)
	require.NoError(t, err)
	got = handleOne(t, c, rec, nil, msg)
	assert.Equal(t, fakelink.Failed, got.disp)
	_ = requireReport(t, got, ErrUnknownURN, DispositionAbandoned)
	assert.Equal(t, int64(2), v.calls.Load(), "no check without a handler")
}

func TestConsumePanickingValidatorIsAFailedAttempt(t *testing.T) {
	rec := newRecorder()
	dlq := &fakelink.Sender{}
	c := mustConsumer(t, Handlers{urnCreated: neverCalled(t)}, WithOnError(rec.onError),
		WithDeadLetterSender(dlq), WithPayloadValidator(panickingValidator{}))
	got := handleOne(t, c, rec, dlq, orderMessage(t, 0))
	assert.Equal(t, fakelink.Failed, got.disp, "retried: the data may be fine")
	de := requireReport(t, got, ErrHandlerFailed, DispositionAbandoned)
	var pe *PanicError
	require.ErrorAs(t, de, &pe)
	assert.Contains(t, de.Error(), "payload validator panicked: validator bug")
	assert.Empty(t, got.dlq)

	got = handleOne(t, c, newRecorder(), dlq, orderMessage(t, DefaultMaxTries-1))
	assert.Equal(t, fakelink.Accepted, got.disp)
	require.Len(t, got.dlq, 1, "at the limit it is dead-lettered as a failure")
	assert.Equal(t, ReasonFailed, dlqEnvelope(t, got.dlq[0]).DeadLetter.Reason)
}

func TestInvalidPayloadObservedAndNamed(t *testing.T) {
	assert.Equal(t, "invalid_payload", KindInvalidPayload.String())
	obs := &kindObserver{}
	c := mustConsumer(t, Handlers{urnCreated: neverCalled(t)}, WithObserver(obs),
		WithOnError(newRecorder().onError), WithPayloadValidator(&orderIDValidator{}))
	handleOne(t, c, newRecorder(), nil, invalidOrderMessage(t, 0))
	require.Len(t, obs.events, 1)
	assert.Equal(t, KindInvalidPayload, obs.events[0].Kind)
	assert.Equal(t, DispositionDropped, obs.events[0].Disposition)
}

// blockingValidator holds every check until its context ends, as a
// validator at work on a large data object does, and returns ctx's error.
type blockingValidator struct {
	started chan struct{} // one value per check that began
}

func (v *blockingValidator) ValidatePayload(ctx context.Context, _ string, _ json.RawMessage) error {
	v.started <- struct{}{}
	<-ctx.Done()
	return ctx.Err()
}

// TestConsumePayloadCheckEndsWithListen: Listen's end cuts a payload check
// short; the message was not handled, so it goes back to the broker
// (released, not dead-lettered, not accepted), and Listen returns.
func TestConsumePayloadCheckEndsWithListen(t *testing.T) {
	for _, workers := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d workers", workers), func(t *testing.T) {
			v := &blockingValidator{started: make(chan struct{}, 1)}
			dlq := &fakelink.Sender{}
			obs := &kindObserver{}
			rec := newRecorder()
			c := mustConsumer(t, Handlers{urnCreated: neverCalled(t)}, WithPayloadValidator(v), WithObserver(obs),
				WithDeadLetterSender(dlq), WithOnError(rec.onError), WithConcurrency(workers))
			fr := fakelink.NewReceiver(t, "orders")
			msg := fr.Track(orderMessage(t, 0))
			fr.Push(msg)
			done, cancel := listenInBackground(c, fr)
			<-v.started
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(20 * time.Second):
				t.Fatal("Listen did not return after its context ended during a payload check")
			}
			d, ok := fr.Disposition(msg)
			require.True(t, ok, "the delivery was settled")
			assert.Equal(t, fakelink.Released, d, "given back unhandled")
			assert.Zero(t, dlq.Count(), "not dead-lettered: the data was never found invalid")
			assert.Empty(t, rec.all(), "nothing to report")
			require.Len(t, obs.events, 1)
			assert.Equal(t, KindGivenBack, obs.events[0].Kind)
		})
	}
}

// TestHandlePayloadCheckEndsWithItsContext: the same through Handle, whose
// context is the check's.
func TestHandlePayloadCheckEndsWithItsContext(t *testing.T) {
	v := &blockingValidator{started: make(chan struct{}, 1)}
	dlq := &fakelink.Sender{}
	c := mustConsumer(t, Handlers{urnCreated: neverCalled(t)}, WithPayloadValidator(v), WithDeadLetterSender(dlq))
	fr := fakelink.NewReceiver(t, "orders")
	msg := fr.Track(orderMessage(t, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.NoError(t, c.Handle(ctx, fr, msg))
	d, _ := fr.Disposition(msg)
	assert.Equal(t, fakelink.Released, d)
	assert.Zero(t, dlq.Count())

	// A context that ended before: the validator is not even called.
	msg = fr.Track(orderMessage(t, 0))
	require.NoError(t, c.Handle(ctx, fr, msg))
	d, _ = fr.Disposition(msg)
	assert.Equal(t, fakelink.Released, d)
	assert.Len(t, v.started, 1, "only the first check began")
}

// protectedMessage is an order whose email travels protected by
// fieldProtector (emailValue is the protected string as it is sent).
func protectedMessage(t *testing.T, emailValue string) *amqp.Message {
	t.Helper()
	env, err := NewEnvelope(urnCreated, json.RawMessage(`{"order_id":7,"email":`+emailValue+`}`), EnvelopeTraceID(testTrace), EnvelopeQueue("orders"))
	require.NoError(t, err)
	msg, err := NewMessage(env)
	require.NoError(t, err)
	return msg
}

// TestConsumeUnprotectsBeforeTheCheckAndTheHandler: the check and the
// handler read the restored data, and a dead-letter copy after a failed
// handler keeps the data as it travelled (no cleartext on the DLQ).
func TestConsumeUnprotectsBeforeTheCheckAndTheHandler(t *testing.T) {
	rec := newRecorder()
	dlq := &fakelink.Sender{}
	v := &fieldProtector{}
	var seen string
	c := mustConsumer(t, Handlers{urnCreated: func(_ context.Context, env *Envelope, _ *amqp.Message) error {
		seen = string(env.Data)
		return errors.New("the handler failed")
	}}, WithOnError(rec.onError), WithDeadLetterSender(dlq), WithPayloadValidator(v), WithMaxTries(1))
	got := handleOne(t, c, rec, dlq, protectedMessage(t, `"enc:ImFsaWNlQGV4YW1wbGUuY29tIg=="`))

	assert.JSONEq(t, `{"order_id":7,"email":"alice@example.com"}`, seen, "the handler reads the cleartext")
	assert.JSONEq(t, `{"order_id":7,"email":"alice@example.com"}`, *v.seen.Load(), "the check reads the cleartext")
	require.Len(t, got.dlq, 1)
	body := got.dlq[0].Value.(string)
	assert.NotContains(t, body, "alice", "the DLQ copy carries the data as it travelled")
	assert.JSONEq(t, `{"order_id":7,"email":"enc:ImFsaWNlQGV4YW1wbGUuY29tIg=="}`, string(dlqEnvelope(t, got.dlq[0]).Data))
	de := requireReport(t, got, ErrHandlerFailed, DispositionDeadLettered)
	assert.NotContains(t, de.Error(), "alice")
}

// TestConsumeUndecryptableIsDeadLetteredAtOnce: a value that does not
// decrypt never reaches the check or the handler; it is dead-lettered on
// its first delivery with reason failed, reported as ErrDecrypt
// (KindDecryptFailed), and the record names the field, not its value.
func TestConsumeUndecryptableIsDeadLetteredAtOnce(t *testing.T) {
	rec := newRecorder()
	dlq := &fakelink.Sender{}
	v := &fieldProtector{}
	obs := &kindObserver{}
	c := mustConsumer(t, Handlers{urnCreated: neverCalled(t)}, WithOnError(rec.onError), WithDeadLetterSender(dlq),
		WithPayloadValidator(v), WithMaxTries(5), WithObserver(obs))
	got := handleOne(t, c, rec, dlq, protectedMessage(t, `"enc:!"`))

	assert.Nil(t, v.seen.Load(), "the check never ran")
	assert.Equal(t, fakelink.Accepted, got.disp)
	require.Len(t, got.dlq, 1, "dead-lettered on the first delivery")
	env := dlqEnvelope(t, got.dlq[0])
	assert.JSONEq(t, `{"order_id":7,"email":"enc:!"}`, string(env.Data))
	assert.Equal(t, ReasonFailed, env.DeadLetter.Reason)
	require.NotNil(t, env.DeadLetter.Error)
	assert.Equal(t, "artemis: cannot decrypt a protected field: email: not a value this cipher wrote", *env.DeadLetter.Error)
	de := requireReport(t, got, ErrDecrypt, DispositionDeadLettered)
	assert.Equal(t, KindDecryptFailed, de.Kind)
	assert.Equal(t, "decrypt_failed", de.Kind.String())
	require.Len(t, obs.events, 1)
	assert.Equal(t, KindDecryptFailed, obs.events[0].Kind)

	// Without a DLQ sender: dropped and reported.
	rec = newRecorder()
	c = mustConsumer(t, Handlers{urnCreated: neverCalled(t)}, WithOnError(rec.onError), WithPayloadValidator(v))
	got = handleOne(t, c, rec, nil, protectedMessage(t, `"enc:!"`))
	assert.Equal(t, fakelink.Accepted, got.disp)
	_ = requireReport(t, got, ErrDecrypt, DispositionDropped)
}

// TestConsumeRestoredDataIsCanonical: the data a PayloadProtector restores
// (here re-marshalled by encoding/json, which escapes <, > and &, around a
// value another SDK wrote with \u escapes) reaches the check and the
// handler in the canonical form every decoded Envelope.Data has; data
// restored to something that is not a JSON object is ErrDecrypt, with no
// piece of it in the error.
func TestConsumeRestoredDataIsCanonical(t *testing.T) {
	v := &fieldProtector{}
	var seen string
	c := mustConsumer(t, Handlers{urnCreated: func(_ context.Context, env *Envelope, _ *amqp.Message) error {
		seen = string(env.Data)
		return nil
	}}, WithPayloadValidator(v))
	plain := base64.StdEncoding.EncodeToString([]byte(`"al\u00efce <a&b>"`))
	got := handleOne(t, c, newRecorder(), nil, protectedMessage(t, `"enc:`+plain+`"`))
	assert.Equal(t, fakelink.Accepted, got.disp)
	assert.Equal(t, `{"email":"alïce <a&b>","order_id":7}`, seen, "the handler reads canonical data")
	assert.Equal(t, `{"email":"alïce <a&b>","order_id":7}`, *v.seen.Load(), "the check reads canonical data")

	rec := newRecorder()
	dlq := &fakelink.Sender{}
	c = mustConsumer(t, Handlers{urnCreated: neverCalled(t)}, WithPayloadValidator(&brokenRestore{}), WithOnError(rec.onError), WithDeadLetterSender(dlq))
	got = handleOne(t, c, rec, dlq, protectedMessage(t, `"enc:x"`))
	de := requireReport(t, got, ErrDecrypt, DispositionDeadLettered)
	assert.NotContains(t, de.Error(), "secret", "no piece of the restored data in the error")
}

// brokenRestore restores data to something that is not a JSON object.
type brokenRestore struct{ fieldProtector }

func (*brokenRestore) UnprotectPayload(string, json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(`{"email":"top secret"`), nil
}

// exitingValidator exits the goroutine (runtime.Goexit, as t.FailNow in a
// test's validator does).
type exitingValidator struct{}

func (exitingValidator) ValidatePayload(context.Context, string, json.RawMessage) error {
	runtime.Goexit()
	return nil
}

// TestConsumeValidatorThatExitsIsAFailedAttempt: a validator that exits its
// goroutine is a failed attempt, as a panicking one is: the delivery is
// settled once (retried below the limit, dead-lettered at it), then the
// goroutine goes on exiting.
func TestConsumeValidatorThatExitsIsAFailedAttempt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		count  uint32
		want   fakelink.Disposition
		copies int
	}{
		{"below the limit", 0, fakelink.Failed, 0},
		{"at the limit", DefaultMaxTries - 1, fakelink.Accepted, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder()
			dlq := &fakelink.Sender{}
			c := mustConsumer(t, Handlers{urnCreated: neverCalled(t)}, WithOnError(rec.onError),
				WithDeadLetterSender(dlq), WithPayloadValidator(exitingValidator{}))
			r := fakelink.NewReceiver(t, "orders")
			msg := r.Track(orderMessage(t, tc.count))
			assert.Equal(t, "exited", handleOnItsOwn(c, r, msg))
			d, ok := r.Disposition(msg)
			require.True(t, ok, "the delivery was not settled")
			assert.Equal(t, tc.want, d)
			assert.Equal(t, 1, r.Settled())
			assert.Len(t, dlq.Kept(), tc.copies)
			reports := rec.all()
			require.Len(t, reports, 1)
			assert.ErrorIs(t, reports[0].err, ErrHandlerExited)
		})
	}
}

// TestConsumeValidatorPanicRecoverNeverCoversTheSettlement: the recover of
// a validator's panic covers the validator only: a panic in the settlement
// of an invalid payload (here the dead-letter sender's) is not taken for
// the validator's and settled a second time.
func TestConsumeValidatorPanicRecoverNeverCoversTheSettlement(t *testing.T) {
	c := mustConsumer(t, Handlers{urnCreated: neverCalled(t)}, WithQueue("orders"),
		WithDeadLetterSender(panickingSender{}), WithPayloadValidator(&orderIDValidator{}))
	r := fakelink.NewReceiver(t, "orders")
	env, err := NewEnvelope(urnCreated, json.RawMessage(`{"order_id":0}`), EnvelopeTraceID(testTrace))
	require.NoError(t, err)
	msg, err := NewMessage(env)
	require.NoError(t, err)
	r.Track(msg)
	assert.Equal(t, "panicked", handleOnItsOwn(c, r, msg), "a panic of the library's own path is not hidden")
	assert.LessOrEqual(t, r.Settled(), 1)
	if r.Settled() == 0 {
		// The fake fails a test whose delivery was never settled.
		require.NoError(t, r.ReleaseMessage(context.Background(), msg))
	}
}

// panickingSender panics on every send.
type panickingSender struct{}

func (panickingSender) Send(context.Context, *amqp.Message, *amqp.SendOptions) error {
	panic("sender bug")
}
