package artemis

import (
	"context"
	"errors"
	"testing"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
	"github.com/stretchr/testify/require"
)

// A built envelope keeps its trace id: WithTraceID may repeat it (trimmed) but
// is refused, not ignored, when it names another one.
func TestWithTraceIDOnABuiltEnvelope(t *testing.T) {
	env, err := NewEnvelope("urn:babel:orders:created", map[string]int{"order_id": 1}, EnvelopeTraceID("trace-1"))
	require.NoError(t, err)

	msg, err := NewMessage(env, WithTraceID("  trace-1 "))
	require.NoError(t, err)
	require.Equal(t, "trace-1", msg.Properties.CorrelationID)

	_, err = NewMessage(env, WithTraceID("trace-2"))
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, `"trace-2"`)

	s := &fakelink.Sender{Outcome: fakelink.Accept}
	p := NewPublisher(s, "orders")
	_, err = p.PublishEnvelope(context.Background(), env, WithTraceID("trace-2"))
	require.True(t, errors.Is(err, ErrInvalidConfig), "%v", err)
	require.Empty(t, s.Sent(), "a refused publish sends nothing")

	id, err := p.PublishEnvelope(context.Background(), env, WithTraceID("trace-1"))
	require.NoError(t, err)
	require.Equal(t, env.Meta.ID, id)
	require.Len(t, s.Sent(), 1)
	require.Equal(t, "trace-1", s.Sent()[0].Properties.CorrelationID)

	// Publish builds the envelope, so there the option takes effect.
	_, err = p.Publish(context.Background(), "urn:babel:orders:created", nil, WithTraceID("trace-3"))
	require.NoError(t, err)
	require.Equal(t, "trace-3", s.Sent()[1].Properties.CorrelationID)
}
