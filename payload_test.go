package artemis

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

func (v *orderIDValidator) ValidatePayload(_ context.Context, urn string, data json.RawMessage) error {
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
	assert.Equal(t, "artemis: invalid payload for urn:babel:orders:created: /order_id: must be >= 1; (root): must have at most 3 properties", err.Error())
	assert.ErrorIs(t, err, ErrInvalidPayload)
	assert.NotErrorIs(t, err, ErrInvalidEnvelope)
	assert.Equal(t, "artemis: invalid payload", (&PayloadError{}).Error())
}

type plainValidator struct{ err error }

func (p plainValidator) ValidatePayload(context.Context, string, json.RawMessage) error { return p.err }

func TestCheckPayload(t *testing.T) {
	ctx := context.Background()
	v := &orderIDValidator{}
	require.NoError(t, checkPayload(ctx, v, urnCreated, json.RawMessage(`{"order_id":7}`)))
	require.NoError(t, checkPayload(ctx, v, "urn:babel:other", json.RawMessage(`{"anything":0}`)), "a URN without a schema is not checked")

	// No data is checked as the {} a publish writes for it.
	err := checkPayload(ctx, v, urnCreated, nil)
	assert.Equal(t, "{}", *v.seen.Load())
	var pe *PayloadError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, urnCreated, pe.URN, "the URN is filled in")
	assert.Equal(t, []PayloadViolation{{Pointer: "/order_id", Message: "is required"}}, pe.Violations)

	// A *PayloadError that names its URN is returned as it is; one wrapped
	// in another error is found.
	own := &PayloadError{URN: "urn:x", Violations: []PayloadViolation{{Pointer: "/a", Message: "m"}}}
	assert.Same(t, own, checkPayload(ctx, plainValidator{own}, "urn:x", json.RawMessage(`{}`)))
	wrapped := checkPayload(ctx, plainValidator{errors.Join(errors.New("ctx"), &PayloadError{Violations: own.Violations})}, "urn:y", json.RawMessage(`{}`))
	require.ErrorAs(t, wrapped, &pe)
	assert.Equal(t, "urn:y", pe.URN)
	assert.Equal(t, own.Violations, pe.Violations)

	// Any other error is a violation of the whole object, and stays reachable.
	cause := errors.New("schema says no")
	err = checkPayload(ctx, plainValidator{cause}, "urn:z", json.RawMessage(`{}`))
	assert.ErrorIs(t, err, ErrInvalidPayload)
	assert.ErrorIs(t, err, cause)
	assert.Equal(t, "artemis: invalid payload for urn:z: (root): schema says no", err.Error())
}

func TestPublishRefusesInvalidPayloadAndSendsNothing(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		base   []PublishOption // NewPublisher's
		call   []PublishOption // per publish
		sender func(*fakelink.Sender) Sender
	}{
		{"publisher option", []PublishOption{WithPayloadValidator(&orderIDValidator{})}, nil, nil},
		{"per-call option", nil, []PublishOption{WithPayloadValidator(&orderIDValidator{})}, nil},
		{"plain sender", []PublishOption{WithPayloadValidator(&orderIDValidator{})}, nil,
			func(s *fakelink.Sender) Sender { return fakelink.PlainSender{S: s} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := &fakelink.Sender{}
			var s Sender = fs
			if tc.sender != nil {
				s = tc.sender(fs)
			}
			p := NewPublisher(s, "orders", tc.base...)

			_, err := p.Publish(ctx, Job(urnCreated, map[string]any{"order_id": 0, "extra": true}), tc.call...)
			require.ErrorIs(t, err, ErrInvalidPayload)
			assert.Contains(t, err.Error(), "/order_id: must be >= 1")
			assert.Contains(t, err.Error(), "/extra: is not allowed")
			assert.True(t, strings.HasPrefix(err.Error(), "artemis: invalid payload for urn:babel:orders:created: "), err.Error())
			var pe *PayloadError
			require.ErrorAs(t, err, &pe)
			assert.Len(t, pe.Violations, 2)

			env, err := NewEnvelope(urnCreated, map[string]any{"order_id": "x"})
			require.NoError(t, err)
			_, err = p.Publish(ctx, env, tc.call...)
			require.ErrorIs(t, err, ErrInvalidPayload)
			assert.Contains(t, err.Error(), "/order_id: must be an integer")

			_, err = p.PublishWithReceipt(ctx, Job(urnCreated, nil), tc.call...)
			require.ErrorIs(t, err, ErrInvalidPayload)
			assert.Contains(t, err.Error(), "/order_id: is required")

			assert.Equal(t, 0, fs.Count(), "nothing was sent")

			// Valid data, and a URN without a schema, go out.
			_, err = p.Publish(ctx, Job(urnCreated, map[string]any{"order_id": 1042}), tc.call...)
			require.NoError(t, err)
			_, err = p.Publish(ctx, Job("urn:babel:orders:cancelled", map[string]any{"anything": 0}), tc.call...)
			require.NoError(t, err)
			assert.Equal(t, 2, fs.Count())
		})
	}
}

func TestNewMessageChecksPayload(t *testing.T) {
	env, err := NewEnvelope(urnCreated, map[string]any{"order_id": -1})
	require.NoError(t, err)
	_, err = NewMessage(env, WithPayloadValidator(&orderIDValidator{}))
	assert.ErrorIs(t, err, ErrInvalidPayload)
	_, err = NewMessage(env)
	assert.NoError(t, err, "without a validator nothing is checked")
	_, err = NewMessage(env, WithPayloadValidator(nil))
	assert.NoError(t, err, "a nil validator checks nothing")
}

type panickingValidator struct{}

func (panickingValidator) ValidatePayload(context.Context, string, json.RawMessage) error {
	panic("validator bug")
}

type kindObserver struct{ events []SettleEvent }

func (o *kindObserver) Settled(ev SettleEvent) { o.events = append(o.events, ev) }
func (o *kindObserver) Published(PublishEvent) {}

// TestPublishPayloadCheckEndsWithTheContext: a publish whose context ends
// during the payload check returns ctx's error (not ErrInvalidPayload: the
// data was never found invalid) and sends nothing; one whose context ended
// before does not run the check.
func TestPublishPayloadCheckEndsWithTheContext(t *testing.T) {
	for _, receipt := range []bool{false, true} {
		v := &blockingValidator{started: make(chan struct{}, 1)}
		s := &fakelink.Sender{}
		p := NewPublisher(s, "orders", WithPayloadValidator(v))
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		var err error
		if receipt {
			_, err = p.PublishWithReceipt(ctx, Job(urnCreated, map[string]any{"order_id": 1}))
		} else {
			_, err = p.Publish(ctx, Job(urnCreated, map[string]any{"order_id": 1}))
		}
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.NotErrorIs(t, err, ErrInvalidPayload)
		assert.Len(t, v.started, 1)
		assert.Zero(t, s.Count(), "nothing sent")

		<-v.started
		_, err = p.Publish(ctx, Job(urnCreated, map[string]any{"order_id": 1}))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Empty(t, v.started, "no check with an ended context")
	}
}

// fieldProtector is a PayloadProtector for the seam's tests: it validates
// nothing, and replaces the "email" member of urnCreated's data with
// "enc:" and the base64 of its JSON (and back). A value "enc:!" fails to
// decrypt; ProtectPayload fails when failProtect is set.
type fieldProtector struct {
	seen        atomic.Pointer[string] // the last data ValidatePayload was given
	failProtect bool
}

func (p *fieldProtector) ValidatePayload(_ context.Context, _ string, data json.RawMessage) error {
	s := string(data)
	p.seen.Store(&s)
	return nil
}

func (p *fieldProtector) rewrite(urn string, data json.RawMessage, f func(json.RawMessage) (json.RawMessage, error)) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if urn != urnCreated || json.Unmarshal(data, &m) != nil || m["email"] == nil {
		return data, nil
	}
	v, err := f(m["email"])
	if err != nil {
		return nil, err
	}
	m["email"] = v
	return json.Marshal(m)
}

func (p *fieldProtector) ProtectPayload(urn string, data json.RawMessage) (json.RawMessage, error) {
	return p.rewrite(urn, data, func(v json.RawMessage) (json.RawMessage, error) {
		if p.failProtect {
			return nil, errors.New("email: the key service is down")
		}
		return json.Marshal("enc:" + base64.StdEncoding.EncodeToString(v))
	})
}

func (p *fieldProtector) UnprotectPayload(urn string, data json.RawMessage) (json.RawMessage, error) {
	return p.rewrite(urn, data, func(v json.RawMessage) (json.RawMessage, error) {
		var s string
		if json.Unmarshal(v, &s) != nil || !strings.HasPrefix(s, "enc:") {
			return v, nil
		}
		b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "enc:"))
		if err != nil {
			return nil, errors.New("email: not a value this cipher wrote")
		}
		return b, nil
	})
}

// TestPublishProtectsAfterTheCheck: the validator sees the data as the
// caller wrote it, the broker gets it protected, the caller's envelope is
// not changed, and a failed protection sends nothing.
func TestPublishProtectsAfterTheCheck(t *testing.T) {
	ctx := context.Background()
	fs := &fakelink.Sender{}
	v := &fieldProtector{}
	p := NewPublisher(fs, "orders", WithPayloadValidator(v))
	_, err := p.Publish(ctx, Job(urnCreated, map[string]any{"order_id": 1, "email": "alice@example.com"}))
	require.NoError(t, err)
	assert.JSONEq(t, `{"order_id":1,"email":"alice@example.com"}`, *v.seen.Load(), "the check saw the cleartext")
	require.Equal(t, 1, fs.Count())
	body := fs.Sent()[0].Value.(string)
	assert.NotContains(t, body, "alice")
	env, err := Decode([]byte(body))
	require.NoError(t, err)
	assert.JSONEq(t, `{"order_id":1,"email":"enc:ImFsaWNlQGV4YW1wbGUuY29tIg=="}`, string(env.Data))

	mine, err := NewEnvelope(urnCreated, json.RawMessage(`{"email":"bob@example.com"}`))
	require.NoError(t, err)
	msg, err := NewMessage(mine, WithPayloadValidator(v))
	require.NoError(t, err)
	assert.NotContains(t, msg.Value.(string), "bob@")
	assert.Equal(t, `{"email":"bob@example.com"}`, string(mine.Data), "the caller's envelope is not changed")

	// An encoded body cannot be protected: refused, nothing sent.
	encoded, err := mine.Encode()
	require.NoError(t, err)
	_, err = p.PublishWithReceipt(ctx, Encoded(encoded))
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "protects fields")
	other, err := NewEnvelope("urn:babel:orders:cancelled", json.RawMessage(`{"email":"x"}`))
	require.NoError(t, err)
	encoded, err = other.Encode()
	require.NoError(t, err)
	r, err := p.PublishWithReceipt(ctx, Encoded(encoded))
	require.NoError(t, err, "a body with nothing to protect goes out as it is")
	require.NoError(t, r.Wait(ctx))

	v.failProtect = true
	_, err = p.Publish(ctx, Job(urnCreated, map[string]any{"email": "carol@example.com"}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "protecting the data of urn:babel:orders:created: email: the key service is down")
	assert.NotContains(t, err.Error(), "carol")
	assert.Equal(t, 2, fs.Count(), "nothing more was sent")
}
