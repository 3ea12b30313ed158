package artemis

import (
	"context"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHandlerSeesReconciledAttemptsAndHeaders(t *testing.T) {
	cases := []struct {
		body  int
		dc    uint32
		want  int
		label string
	}{{0, 0, 0, "(0,0)"}, {0, 2, 2, "(0,2)"}, {2, 5, 5, "(2,5)"}, {5, 1, 5, "(5,1)"}, {4, 0, 4, "(4,0)"}, {3, 3, 3, "(3,3)"}}
	for _, tc := range cases {
		t.Run(tc.label, func(t *testing.T) {
			env, err := NewEnvelope(urnCreated, nil, EnvelopeTraceID(testTrace))
			require.NoError(t, err)
			env.Attempts = tc.body
			msg, err := NewMessage(env, WithHeaders(map[string]string{"traceparent": "00-abc-def-01"}))
			require.NoError(t, err)
			msg.Header.DeliveryCount = tc.dc
			var seen int
			var headers HeaderCarrier
			var raw *amqp.Message
			c := mustConsumer(t, Handlers{urnCreated: func(ctx context.Context, e *Envelope, m *amqp.Message) error {
				seen, headers, raw = e.Attempts, HeadersFromContext(ctx), MessageFromContext(ctx)
				return nil
			}}, WithMaxTries(100))
			got := handleOne(t, c, newRecorder(), nil, msg)
			assert.Equal(t, fakelink.Accepted, got.disp)
			assert.Equal(t, tc.want, seen)
			assert.Equal(t, "00-abc-def-01", headers.Get("traceparent"))
			assert.Equal(t, HeaderCarrier{"traceparent": "00-abc-def-01"}, headers, "the caller's headers only, not the contract's")
			assert.Equal(t, "babelqueue", raw.ApplicationProperties[PropAppID], "the raw message keeps them")
			assert.Same(t, msg, raw)
		})
	}
}

func TestGiveBackFailureIsLogged(t *testing.T) {
	logs := captureDefaultLog(t)
	c := mustConsumer(t, Handlers{urnCreated: succeeding})
	r := fakelink.NewReceiver(t, "orders")
	r.SettleErr = fakelink.ErrLinkClosed
	msg := r.Track(orderMessage(t, 0))
	c.giveBack(context.Background(), r, msg)
	lines := logs.lines(t)
	require.Len(t, lines, 1)
	assert.Equal(t, "settlement failed", lines[0]["msg"])
	assert.Equal(t, "orders", lines[0]["queue"])
	assert.Equal(t, urnCreated, lines[0]["urn"])
}
