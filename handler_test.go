package artemis

import (
	"context"
	"errors"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHandlerPanicIsAFailedAttempt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value any
	}{{"string", "kaboom"}, {"error", errors.New("bad state")}, {"nil", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder()
			dlq := &fakelink.Sender{}
			c := mustConsumer(t, Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error {
				panic(tc.value)
			}}, WithOnError(rec.onError), WithDeadLetterSender(dlq))

			got := handleOne(t, c, rec, dlq, orderMessage(t, 0))
			assert.Equal(t, fakelink.Failed, got.disp)
			require.Len(t, got.reports, 1)
			var pe *PanicError
			require.ErrorAs(t, got.reports[0].err, &pe)
			assert.NotEmpty(t, pe.Stack)

			// At the limit the panic dead-letters like an error.
			rec2 := newRecorder()
			c2 := mustConsumer(t, Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error {
				panic(tc.value)
			}}, WithOnError(rec2.onError), WithDeadLetterSender(dlq))
			got = handleOne(t, c2, rec2, dlq, orderMessage(t, 2))
			assert.Equal(t, fakelink.Accepted, got.disp)
			require.Len(t, got.dlq, 1)
			env := dlqEnvelope(t, got.dlq[0])
			require.NotNil(t, env.DeadLetter.Error)
			assert.Contains(t, *env.DeadLetter.Error, "panicked")
		})
	}
}
