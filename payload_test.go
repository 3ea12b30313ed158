package artemis

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// orderIDValidator is a tiny PayloadValidator for the seam's tests: for
// urnCreated, data must have an integer order_id >= 1 and nothing else;
// other URNs have no schema. It counts its calls.
type orderIDValidator struct {
	calls atomic.Int64
	seen  atomic.Pointer[string] // the last data it was given
}

func (v *orderIDValidator) ValidatePayload(urn string, data json.RawMessage) error {
	v.calls.Add(1)
	s := string(data)
	v.seen.Store(&s)
	if urn != urnCreated {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	var out []PayloadViolation
	raw, ok := m["order_id"]
	switch {
	case !ok:
		out = append(out, PayloadViolation{Pointer: "/order_id", Message: "is required"})
	default:
		var id int64
		if err := json.Unmarshal(raw, &id); err != nil {
			out = append(out, PayloadViolation{Pointer: "/order_id", Message: "must be an integer"})
		} else if id < 1 {
			out = append(out, PayloadViolation{Pointer: "/order_id", Message: "must be >= 1"})
		}
	}
	for k := range m {
		if k != "order_id" {
			out = append(out, PayloadViolation{Pointer: "/" + k, Message: "is not allowed"})
		}
	}
	if out == nil {
		return nil
	}
	return &PayloadError{Violations: out}
}

// invalidOrderMessage is orderMessage with data that fails the validator.
func invalidOrderMessage(t *testing.T, deliveryCount uint32) *amqp.Message {
	t.Helper()
	env, err := NewEnvelope(urnCreated, json.RawMessage(`{"order_id":0}`), EnvelopeTraceID(testTrace), EnvelopeQueue("orders"))
	require.NoError(t, err)
	msg, err := NewMessage(env)
	require.NoError(t, err)
	msg.Header.DeliveryCount = deliveryCount
	return msg
}

func TestPayloadErrorText(t *testing.T) {
	err := &PayloadError{URN: urnCreated, Violations: []PayloadViolation{
		{Pointer: "/order_id", Message: "must be >= 1"},
		{Pointer: "", Message: "must have at most 3 properties"},
	}}
	assert.Equal(t, "babelqueue: invalid payload for urn:babel:orders:created: /order_id: must be >= 1; (root): must have at most 3 properties", err.Error())
	assert.ErrorIs(t, err, ErrInvalidPayload)
	assert.NotErrorIs(t, err, ErrInvalidEnvelope)
	assert.Equal(t, "babelqueue: invalid payload", (&PayloadError{}).Error())
}

type plainValidator struct{ err error }

func (p plainValidator) ValidatePayload(string, json.RawMessage) error { return p.err }

func TestCheckPayload(t *testing.T) {
	v := &orderIDValidator{}
	require.NoError(t, checkPayload(v, urnCreated, json.RawMessage(`{"order_id":7}`)))
	require.NoError(t, checkPayload(v, "urn:babel:other", json.RawMessage(`{"anything":0}`)), "a URN without a schema is not checked")

	// No data is checked as the {} a publish writes for it.
	err := checkPayload(v, urnCreated, nil)
	assert.Equal(t, "{}", *v.seen.Load())
	var pe *PayloadError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, urnCreated, pe.URN, "the URN is filled in")
	assert.Equal(t, []PayloadViolation{{Pointer: "/order_id", Message: "is required"}}, pe.Violations)

	// A *PayloadError that names its URN is returned as it is; one wrapped
	// in another error is found.
	own := &PayloadError{URN: "urn:x", Violations: []PayloadViolation{{Pointer: "/a", Message: "m"}}}
	assert.Same(t, own, checkPayload(plainValidator{own}, "urn:x", json.RawMessage(`{}`)))
	wrapped := checkPayload(plainValidator{errors.Join(errors.New("ctx"), &PayloadError{Violations: own.Violations})}, "urn:y", json.RawMessage(`{}`))
	require.ErrorAs(t, wrapped, &pe)
	assert.Equal(t, "urn:y", pe.URN)
	assert.Equal(t, own.Violations, pe.Violations)

	// Any other error is a violation of the whole object, and stays reachable.
	cause := errors.New("schema says no")
	err = checkPayload(plainValidator{cause}, "urn:z", json.RawMessage(`{}`))
	assert.ErrorIs(t, err, ErrInvalidPayload)
	assert.ErrorIs(t, err, cause)
	assert.Equal(t, "babelqueue: invalid payload for urn:z: (root): schema says no", err.Error())
}

func TestPublishRefusesInvalidPayloadAndSendsNothing(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		base   []PublishOption // NewPublisher's
		call   []PublishOption // per publish
		sender func(*fakelink.Sender) Sender
	}{
		{"publisher option", []PublishOption{WithPublishPayloadValidator(&orderIDValidator{})}, nil, nil},
		{"per-call option", nil, []PublishOption{WithPublishPayloadValidator(&orderIDValidator{})}, nil},
		{"plain sender", []PublishOption{WithPublishPayloadValidator(&orderIDValidator{})}, nil,
			func(s *fakelink.Sender) Sender { return fakelink.PlainSender{S: s} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := &fakelink.Sender{}
			var s Sender = fs
			if tc.sender != nil {
				s = tc.sender(fs)
			}
			p := NewPublisher(s, "orders", tc.base...)

			_, err := p.Publish(ctx, urnCreated, map[string]any{"order_id": 0, "extra": true}, tc.call...)
			require.ErrorIs(t, err, ErrInvalidPayload)
			assert.Contains(t, err.Error(), "/order_id: must be >= 1")
			assert.Contains(t, err.Error(), "/extra: is not allowed")
			assert.True(t, strings.HasPrefix(err.Error(), "babelqueue: invalid payload for urn:babel:orders:created: "), err.Error())
			var pe *PayloadError
			require.ErrorAs(t, err, &pe)
			assert.Len(t, pe.Violations, 2)

			env, err := NewEnvelope(urnCreated, map[string]any{"order_id": "x"})
			require.NoError(t, err)
			_, err = p.PublishEnvelope(ctx, env, tc.call...)
			require.ErrorIs(t, err, ErrInvalidPayload)
			assert.Contains(t, err.Error(), "/order_id: must be an integer")

			_, err = p.PublishWithReceipt(ctx, urnCreated, nil, tc.call...)
			require.ErrorIs(t, err, ErrInvalidPayload)
			assert.Contains(t, err.Error(), "/order_id: is required")

			assert.Equal(t, 0, fs.Count(), "nothing was sent")

			// Valid data, and a URN without a schema, go out.
			_, err = p.Publish(ctx, urnCreated, map[string]any{"order_id": 1042}, tc.call...)
			require.NoError(t, err)
			_, err = p.Publish(ctx, "urn:babel:orders:cancelled", map[string]any{"anything": 0}, tc.call...)
			require.NoError(t, err)
			assert.Equal(t, 2, fs.Count())
		})
	}
}

func TestNewMessageChecksPayload(t *testing.T) {
	env, err := NewEnvelope(urnCreated, map[string]any{"order_id": -1})
	require.NoError(t, err)
	_, err = NewMessage(env, WithPublishPayloadValidator(&orderIDValidator{}))
	assert.ErrorIs(t, err, ErrInvalidPayload)
	_, err = NewMessage(env)
	assert.NoError(t, err, "without a validator nothing is checked")
	_, err = NewMessage(env, WithPublishPayloadValidator(nil))
	assert.NoError(t, err, "a nil validator checks nothing")
}

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
	assert.Equal(t, "babelqueue: invalid payload for urn:babel:orders:created: /order_id: must be >= 1", *dl.Error)
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

type panickingValidator struct{}

func (panickingValidator) ValidatePayload(string, json.RawMessage) error { panic("validator bug") }

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
	assert.Equal(t, "invalid_payload", SettleEvent{Kind: ErrInvalidPayload}.KindName())
	obs := &kindObserver{}
	c := mustConsumer(t, Handlers{urnCreated: neverCalled(t)}, WithObserver(obs),
		WithOnError(newRecorder().onError), WithPayloadValidator(&orderIDValidator{}))
	handleOne(t, c, newRecorder(), nil, invalidOrderMessage(t, 0))
	require.Len(t, obs.events, 1)
	assert.Equal(t, "invalid_payload", obs.events[0].KindName())
	assert.Equal(t, DispositionDropped, obs.events[0].Disposition)
}

type kindObserver struct{ events []SettleEvent }

func (o *kindObserver) Settled(ev SettleEvent) { o.events = append(o.events, ev) }
func (o *kindObserver) Published(PublishEvent) {}
