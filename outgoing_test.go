package artemis

import (
	"context"
	"errors"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// Each Outgoing goes out as the same message, through Publish and through
// PublishWithReceipt: the envelope as it is, its encoding byte for byte,
// and a Job built with the publisher's queue.
func TestPublishSendsEachOutgoingAlike(t *testing.T) {
	env, err := NewEnvelope(urnCreated, map[string]int{"order_id": 1042}, EnvelopeQueue("orders"), EnvelopeTraceID("trace-1"))
	require.NoError(t, err)
	body, err := env.Encode()
	require.NoError(t, err)
	ctx := context.Background()

	for _, receipt := range []bool{false, true} {
		send := func(p *Publisher, m Outgoing) string {
			if !receipt {
				id, err := p.Publish(ctx, m, WithPriority(7))
				require.NoError(t, err)
				return id
			}
			r, err := p.PublishWithReceipt(ctx, m, WithPriority(7))
			require.NoError(t, err)
			require.NoError(t, r.Wait(ctx))
			return r.ID()
		}
		fs := &fakelink.Sender{}
		p := NewPublisher(fs, "orders")
		assert.Equal(t, env.Meta.ID, send(p, env), "receipt %t", receipt)
		assert.Equal(t, env.Meta.ID, send(p, Encoded(body)), "receipt %t", receipt)
		jobID := send(p, Job(urnCreated, map[string]int{"order_id": 1042}, EnvelopeTraceID("trace-1")))
		assert.NotEqual(t, env.Meta.ID, jobID, "a Job builds a new envelope")

		sent := fs.Sent()
		require.Len(t, sent, 3)
		asIs, encoded, built := wireDecoded(t, sent[0]), wireDecoded(t, sent[1]), wireDecoded(t, sent[2])
		assert.Equal(t, string(body), encoded.Value, "the encoded bytes are the body")
		assert.Equal(t, asIs.Value, encoded.Value)
		assert.Equal(t, asIs.Properties, encoded.Properties)
		assert.Equal(t, asIs.ApplicationProperties, encoded.ApplicationProperties)
		assert.Equal(t, uint8(7), encoded.Header.Priority, "the call's options apply to Encoded")

		job := sentEnvelope(t, sent[2])
		assert.Equal(t, urnCreated, job.URN)
		assert.Equal(t, "orders", job.Meta.Queue, "meta.queue is the publisher's")
		assert.Equal(t, "trace-1", job.TraceID, "the Job's envelope options apply")
		assert.Equal(t, jobID, job.Meta.ID)
		assert.Equal(t, uint8(7), built.Header.Priority)
	}
}

// Nothing, a nil envelope and bytes that are no envelope are refused before
// anything is sent, by both methods, and told to WithOnOutcome once.
func TestPublishRefusesWhatIsNoMessage(t *testing.T) {
	ctx := context.Background()
	cases := map[string]Outgoing{
		"nil Outgoing":  nil,
		"nil envelope":  (*Envelope)(nil),
		"empty Encoded": Encoded(nil),
		"not JSON":      Encoded("{"),
		"blank URN Job": Job(" ", nil),
	}
	for name, m := range cases {
		t.Run(name, func(t *testing.T) {
			fs := &fakelink.Sender{}
			var outcomes []error
			p := NewPublisher(fs, "orders", WithOnOutcome(func(_ string, err error) { outcomes = append(outcomes, err) }))
			id, err := p.Publish(ctx, m)
			require.ErrorIs(t, err, ErrInvalidEnvelope)
			assert.Empty(t, id)
			r, err := p.PublishWithReceipt(ctx, m)
			require.ErrorIs(t, err, ErrInvalidEnvelope)
			assert.Nil(t, r)
			assert.Empty(t, fs.Sent(), "nothing sent")
			require.Len(t, outcomes, 2, "each refusal is the outcome of its publish")
			for _, o := range outcomes {
				assert.ErrorIs(t, o, ErrInvalidEnvelope)
			}
		})
	}
}

// Publish of Encoded bytes waits for the broker's outcome, as Publish of an
// envelope does: a refusal is an error naming the URN and the queue, told
// to the observer once.
func TestPublishEncodedWaitsForTheOutcome(t *testing.T) {
	env, err := NewEnvelope(urnCreated, nil, EnvelopeQueue("orders"))
	require.NoError(t, err)
	body, err := env.Encode()
	require.NoError(t, err)
	obs := &observed{}
	fs := &fakelink.Sender{Outcome: func(context.Context, *amqp.Message) (amqp.DeliveryState, error) {
		return &amqp.StateRejected{}, nil
	}}
	id, err := NewPublisher(fs, "orders", WithObserver(obs)).Publish(context.Background(), Encoded(body))
	require.ErrorIs(t, err, ErrNotAccepted)
	assert.Empty(t, id)
	assert.Contains(t, err.Error(), "publish "+urnCreated+" to orders")
	var oe *OutcomeError
	require.True(t, errors.As(err, &oe))
	evs := obs.publishes()
	require.Len(t, evs, 1)
	assert.Equal(t, PublishNotAccepted, evs[0].Outcome)
	assert.Equal(t, env.Meta.ID, evs[0].MessageID)
	assert.Len(t, fs.Sent(), 1)
}

// EnvelopeOf gives the envelope a publish of m sends: a Job's built with
// the defaults before its own options, an envelope itself, Encoded bytes
// decoded; what is no envelope is refused as a publish refuses it.
func TestEnvelopeOfEachOutgoing(t *testing.T) {
	env, err := EnvelopeOf(Job(urnCreated, map[string]int{"n": 1}, EnvelopeTraceID("mine")),
		EnvelopeQueue("orders"), EnvelopeTraceID("default"))
	require.NoError(t, err)
	assert.Equal(t, urnCreated, env.URN)
	assert.Equal(t, "orders", env.Meta.Queue, "a default applies")
	assert.Equal(t, "mine", env.TraceID, "the Job's own option wins over a default")
	assert.JSONEq(t, `{"n":1}`, string(env.Data))

	built, err := EnvelopeOf(Job(urnCreated, nil), EnvelopeTraceID("default"))
	require.NoError(t, err)
	assert.Equal(t, "default", built.TraceID)

	same, err := EnvelopeOf(env, EnvelopeTraceID("ignored"))
	require.NoError(t, err)
	assert.Same(t, env, same, "an envelope is itself; defaults do not touch it")

	body, err := env.Encode()
	require.NoError(t, err)
	decoded, err := EnvelopeOf(Encoded(body))
	require.NoError(t, err)
	assert.Equal(t, env.Meta.ID, decoded.Meta.ID)
	assert.Equal(t, "mine", decoded.TraceID)

	for name, m := range map[string]Outgoing{"nil": nil, "nil envelope": (*Envelope)(nil), "not JSON": Encoded("{"), "blank URN": Job(" ", nil)} {
		got, err := EnvelopeOf(m)
		assert.ErrorIs(t, err, ErrInvalidEnvelope, name)
		assert.Nil(t, got, name)
	}
}
