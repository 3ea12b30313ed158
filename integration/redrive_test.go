package integration_test

// A dead-lettering is never dropped as a duplicate of an earlier one: a
// message redriven the way every BabelQueue SDK's redrive does it (the same
// meta.id and created_at, no duplicate id) that fails again reaches the DLQ
// again, every round; so do a foreign producer's poison and gated messages
// that reuse a message-id.

import (
	"context"
	"fmt"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
)

const redriveRounds = 3

func TestIntegrationRedrivenMessageThatFailsAgainReachesTheDLQ(t *testing.T) {
	_, conn, q := onBroker(t)
	const urn = "urn:babel:orders:created"
	dlq := q + ".dlq"
	ru := startDeadLetterRun(t, conn, q, urn, conn.NewSender(dlq))
	pub := artemis.NewPublisher(conn.NewSender(q), q)

	first := ru.env
	for round := 1; round <= redriveRounds; round++ {
		require.ErrorIs(t, ru.errs.next(t), artemis.ErrHandlerFailed, "round %d: reported", round)
		rec := receiveOn(t, conn, dlq, nil)
		got, err := artemis.Decode([]byte(valueString(t, rec)))
		require.NoError(t, err, "round %d: the DLQ record decodes", round)
		require.NotNil(t, got.DeadLetter, "round %d: a dead_letter block", round)
		assert.Equal(t, first.Meta.ID, got.Meta.ID, "round %d: the same meta.id", round)
		assert.Equal(t, first.Meta.CreatedAt, got.Meta.CreatedAt, "round %d: the same created_at", round)
		if round == redriveRounds {
			break
		}
		// A peer's redrive: the record without its block, attempts 0,
		// republished as it is (meta is immutable), no duplicate id.
		got.DeadLetter = nil
		got.Attempts = 0
		ctx, cancel := context.WithTimeout(context.Background(), arrival)
		_, err = pub.Publish(ctx, got)
		cancel()
		require.NoError(t, err)
	}
	for range redriveRounds {
		nextCall(t, ru.calls)
	}
	ru.l.stop()
	assertNothingLeft(t, ru.errs, conn, q, dlq)
}

func TestIntegrationForeignMessageIDReusedReachesTheDLQEveryTime(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind error
		msg  func(round int) *amqp.Message
	}{
		{"poison", artemis.ErrPoison, func(round int) *amqp.Message {
			return &amqp.Message{
				Value:      fmt.Sprintf("{not an envelope, round-%d", round),
				Properties: &amqp.MessageProperties{MessageID: "foreign-reused-id"},
			}
		}},
		{"gated", artemis.ErrVersionGated, func(round int) *amqp.Message {
			return &amqp.Message{
				Value:                 fmt.Sprintf(`{"job":"urn:babel:orders:created","marker":"round-%d"}`, round),
				Properties:            &amqp.MessageProperties{MessageID: "foreign-reused-id"},
				ApplicationProperties: map[string]any{artemis.PropSchemaVersion: "2"},
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, conn, q := onBroker(t)
			dlq := q + ".dlq"
			errs := newErrorLog()
			cons := testkit.MustConsumer(t, artemis.Handlers{"urn:babel:orders:created": func(context.Context, *artemis.Envelope, *amqp.Message) error {
				t.Error("a poison or gated message reached a handler")
				return nil
			}}, artemis.WithDeadLetterSender(conn.NewSender(dlq)), artemis.WithQueue(q), artemis.WithOnError(errs.onError))
			l := listen(t, conn, q, cons, 1)
			for round := 1; round <= redriveRounds; round++ {
				conn.Send(q, tc.msg(round))
				de := errs.next(t)
				require.ErrorIs(t, de, tc.kind, "round %d: reported", round)
				assert.Equal(t, artemis.DispositionDeadLettered, de.Disposition, "round %d", round)
				rec := receiveOn(t, conn, dlq, &brokertest.ReceiverOptions{})
				assert.Contains(t, bodyOf(rec), fmt.Sprintf("round-%d", round), "round %d is on the DLQ", round)
			}
			l.stop()
			assertNothingLeft(t, errs, conn, q, dlq)
		})
	}
}
