package artemis

// Contract rules (CONTRACT.md) checked one by one where no other test
// pinned them.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// TestForwardedCopiesDropTheSourcesRoutingAnnotations: a gated message and
// a poison record are forwarded with the source's annotations, but never
// with the ones Artemis routes by. A JMS topic publisher's message carries
// x-opt-jms-dest 1 (topic); sent on to the anycast <queue>.dlq with it,
// Artemis routes the copy as multicast, finds no multicast queue there,
// drops it and answers accepted: the source was accepted and the message
// lost (CONTRACT.md sections 5 and 6: never accepted on a failed write).
func TestForwardedCopiesDropTheSourcesRoutingAnnotations(t *testing.T) {
	fromTopic := func(msg *amqp.Message) *amqp.Message {
		if msg.Annotations == nil {
			msg.Annotations = amqp.Annotations{}
		}
		msg.Annotations[annotationJMSDest] = int8(1)
		msg.Annotations[annotationRoutingType] = int8(0)
		msg.Annotations["x-opt-jms-msg-type"] = int8(5)
		return msg
	}
	gated := fromTopic(orderMessage(t, 0))
	gated.ApplicationProperties[PropSchemaVersion] = "2"
	for name, msg := range map[string]*amqp.Message{
		"gated":         gated,
		"poison":        fromTopic(rawMessage("not json")),
		"poison object": fromTopic(rawMessage(`{"job":"urn:babel:orders:created"}`)),
	} {
		t.Run(name, func(t *testing.T) {
			dlq := &fakelink.Sender{}
			c := mustConsumer(t, Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error { return nil }},
				WithDeadLetterSender(dlq))
			got := handleOne(t, c, newRecorder(), dlq, msg)
			assert.Equal(t, fakelink.Accepted, got.disp)
			require.Len(t, got.dlq, 1)
			fwd := got.dlq[0]
			assert.NotContains(t, fwd.Annotations, annotationJMSDest, "the source's destination type would route the copy as multicast")
			assert.NotContains(t, fwd.Annotations, annotationRoutingType, "the source's routing type would route the copy by it")
			assert.Equal(t, int8(5), fwd.Annotations["x-opt-jms-msg-type"], "the other annotations ride along")
			assert.Equal(t, int8(1), msg.Annotations[annotationJMSDest], "the source message is not modified")
		})
	}
}

// TestPublishRefusesAnEnvelopeEveryConsumerRefuses: an *Envelope is
// published as it is, but never one that every consumer refuses
// (CONTRACT.md section 1: schema_version the integer 1, attempts >= 0, a
// non-blank trace_id): such a message would be gated (bq_schema_version
// not "1") or poisoned on its first delivery while Publish reported
// success. Encoded bytes were refused for the same faults already. What a
// consumer does accept (no meta.id, no created_at) is still sent.
func TestPublishRefusesAnEnvelopeEveryConsumerRefuses(t *testing.T) {
	valid := func() *Envelope {
		return &Envelope{URN: "urn:bare", TraceID: "t-1", Meta: Meta{Lang: Lang, SchemaVersion: SchemaVersion}}
	}
	for _, tc := range []struct {
		name, problem string
		change        func(*Envelope)
	}{
		{"schema_version 0", "meta.schema_version is 0, want 1", func(e *Envelope) { e.Meta.SchemaVersion = 0 }},
		{"schema_version 2", "meta.schema_version is 2, want 1", func(e *Envelope) { e.Meta.SchemaVersion = 2 }},
		{"attempts -1", "attempts is not an integer >= 0: it is -1", func(e *Envelope) { e.Attempts = -1 }},
		{"no trace id", "trace_id is missing or blank", func(e *Envelope) { e.TraceID = "" }},
		{"blank trace id", "trace_id is missing or blank", func(e *Envelope) { e.TraceID = " \t" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := valid()
			tc.change(env)
			msg, err := NewMessage(env)
			assert.Nil(t, msg)
			assert.True(t, errors.Is(err, ErrInvalidEnvelope) && strings.Contains(fmt.Sprint(err), tc.problem),
				"NewMessage: %v, want an ErrInvalidEnvelope saying %q", err, tc.problem)

			s := &fakelink.Sender{}
			id, err := NewPublisher(s, "orders").Publish(context.Background(), env)
			assert.ErrorIs(t, err, ErrInvalidEnvelope)
			assert.Empty(t, id)
			assert.Empty(t, s.Sent(), "nothing is sent")
		})
	}
	t.Run("valid without ids", func(t *testing.T) {
		s := &fakelink.Sender{}
		id, err := NewPublisher(s, "orders").Publish(context.Background(), valid())
		require.NoError(t, err)
		assert.Empty(t, id, "no meta.id to return")
		require.Len(t, s.Sent(), 1)
		_, err = DecodeMessage(wireDecoded(t, s.Sent()[0]))
		assert.NoError(t, err, "a consumer takes what was sent")
	})
}

// TestRoutingFallsBackAnnotationSubjectBody: CONTRACT.md section 3 routes
// on x-opt-jms-type, when it is absent on properties.subject, when both are
// absent on the body URN. An annotation that is no usable string counts as
// absent, so the subject still routes; a blank subject counts as absent
// too.
func TestRoutingFallsBackAnnotationSubjectBody(t *testing.T) {
	const paid = "urn:babel:orders:paid"
	blank := " \t"
	for _, tc := range []struct {
		name       string
		annotation any // nil: none
		subject    *string
		want       string // the handler that runs
	}{
		{"a non-string annotation: the subject", int64(42), ptr(paid), paid},
		{"a blank annotation: the subject", "  ", ptr(paid), paid},
		{"no annotation: the subject", nil, ptr(paid), paid},
		{"an annotation: over the subject", paid, ptr(urnCreated), paid},
		{"a non-string annotation, a blank subject: the body", int64(42), &blank, urnCreated},
		{"neither: the body", nil, nil, urnCreated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := orderMessage(t, 0) // the body's URN is urnCreated
			delete(msg.Annotations, AnnotationJMSType)
			if tc.annotation != nil {
				msg.Annotations[AnnotationJMSType] = tc.annotation
			}
			msg.Properties.Subject = tc.subject
			var ran []string
			handler := func(name string) HandlerFunc {
				return func(_ context.Context, env *Envelope, _ *amqp.Message) error {
					ran = append(ran, name)
					assert.Equal(t, urnCreated, env.URN, "the envelope is the body's, whatever routed it")
					return nil
				}
			}
			c := mustConsumer(t, Handlers{urnCreated: handler(urnCreated), paid: handler(paid)})
			got := handleOne(t, c, newRecorder(), nil, msg)
			assert.Equal(t, fakelink.Accepted, got.disp)
			assert.Equal(t, []string{tc.want}, ran)
		})
	}
}

// TestContractDefaults pins the defaults the contract names (sections 4
// and 5): maxTries 3, a dead-letter timeout of 30 s and a dead-letter
// retry delay of 1 s, on a Consumer built without options.
func TestContractDefaults(t *testing.T) {
	c := mustConsumer(t, Handlers{})
	assert.Equal(t, 3, c.maxTries, "maxTries")
	assert.Equal(t, 30*time.Second, c.dlqTimeout, "the dead-letter timeout")
	assert.Equal(t, time.Second, c.retryDelay, "the dead-letter retry delay")
	assert.Equal(t, UnknownURNFail, c.unknown, "the unknown-URN strategy")

	// With the defaults a failing message is dead-lettered on attempts 2,
	// and lands with attempts 2 in the envelope and in the block.
	dlq := &fakelink.Sender{}
	c = mustConsumer(t, Handlers{urnCreated: failing(errors.New("x"))}, WithDeadLetterSender(dlq), WithRetrySchedule(nil))
	assert.Equal(t, fakelink.Failed, handleOne(t, c, newRecorder(), dlq, orderMessage(t, 1)).disp, "attempts 1: retried")
	got := handleOne(t, c, newRecorder(), dlq, orderMessage(t, 2))
	assert.Equal(t, fakelink.Accepted, got.disp, "attempts 2: dead-lettered")
	require.Len(t, got.dlq, 1)
	env := dlqEnvelope(t, got.dlq[0])
	assert.Equal(t, 2, env.Attempts)
	assert.Equal(t, 2, env.DeadLetter.Attempts)
	assert.Equal(t, "2", got.dlq[0].ApplicationProperties[PropAttempts])
}
