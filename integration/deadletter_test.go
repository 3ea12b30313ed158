package integration_test

// Dead-letter writes the broker does not confirm: the source message is
// plainly released (not counted, not lost) and dead-lettered once the DLQ
// takes writes again.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
)

// failingConsumer always fails its one URN, with maxTries 1 so the first
// failure dead-letters, and a short retry delay.
func failingConsumer(t testing.TB, urn string, dlq artemis.Sender, q string, calls chan<- call, errs *errorLog) *artemis.Consumer {
	return testkit.MustConsumer(t, artemis.Handlers{urn: recordCalls(calls, func() error { return &gatewayError{} })},
		artemis.WithMaxTries(1), artemis.WithDeadLetterSender(dlq), artemis.WithQueue(q),
		artemis.WithDeadLetterRetryDelay(200*time.Millisecond), artemis.WithDeadLetterTimeout(time.Second),
		artemis.WithOnError(errs.onError))
}

// deadLetterRun is one envelope published to a queue and a failingConsumer
// listening there, dead-lettering through a sender the test prepared.
type deadLetterRun struct {
	calls    chan call
	errs     *errorLog
	env      *artemis.Envelope
	original string // the envelope as published
	l        *listener
}

// startDeadLetterRun publishes one envelope of urn to q and listens on q
// with a failingConsumer whose dead-letter sender is dlq.
func startDeadLetterRun(t *testing.T, conn *brokertest.Conn, q, urn string, dlq *amqp.Sender) *deadLetterRun {
	t.Helper()
	ru := &deadLetterRun{calls: make(chan call, 1024), errs: newErrorLog()}
	cons := failingConsumer(t, urn, dlq, q, ru.calls, ru.errs)
	ru.env, ru.original = publishEnvelope(t, artemis.NewPublisher(conn.NewSender(q), q), q, urn)
	ru.l = listen(t, conn, q, cons, 1)
	return ru
}

// nextFailedWrite waits for the next report and asserts that it is a
// dead-letter write that failed, after which the source was plainly
// released.
func (ru *deadLetterRun) nextFailedWrite(t *testing.T) *artemis.DeliveryError {
	t.Helper()
	de := ru.errs.next(t)
	require.ErrorIs(t, de, artemis.ErrDeadLetterFailed)
	assert.Equal(t, artemis.DispositionReleased, de.Disposition, "plain release")
	return de
}

// assertUncountedRedelivery asserts that the handler was called twice
// with attempts 0 and delivery count 0: a plain release after a failed
// write is not a failed delivery.
func (ru *deadLetterRun) assertUncountedRedelivery(t *testing.T) {
	t.Helper()
	assert.Equal(t, call{0, 0}, nextCall(t, ru.calls), "first delivery")
	assert.Equal(t, call{0, 0}, nextCall(t, ru.calls), "redelivered after the plain release, not counted")
}

// TestIntegrationDeadLetterQueueFull dead-letters to a full address
// (bqtest.tinydlq.#: max-size-bytes 1, address-full-policy FAIL: the first
// message fits, then the address refuses). What go-amqp reports depends on
// when the DLQ link was attached:
//   - before the address filled up: the broker settles each transfer as
//     rejected with amqp:resource-limit-exceeded, and the link stays usable;
//   - while the address is full: the broker grants the link no credit, so
//     the transfer never leaves and the dead-letter timeout ends the write
//     (go-amqp: amqp:link:transfer-limit-exceeded).
//
// Either way the source message is released plainly (not counted toward
// max-delivery-attempts, not lost), and once the DLQ is drained a later
// delivery is dead-lettered.
func TestIntegrationDeadLetterQueueFull(t *testing.T) {
	for _, tc := range []struct {
		name        string
		attachFirst bool // attach the DLQ link before the address fills up
		check       func(t *testing.T, de *artemis.DeliveryError)
	}{
		{"rejected", true, func(t *testing.T, de *artemis.DeliveryError) {
			var oe *artemis.OutcomeError
			require.ErrorAs(t, de, &oe, "the broker's outcome: %v", de)
			rejected, ok := oe.State.(*amqp.StateRejected)
			require.True(t, ok, "outcome %T, want rejected", oe.State)
			require.NotNil(t, rejected.Error)
			assert.Equal(t, amqp.ErrCondResourceLimitExceeded, rejected.Error.Condition)
		}},
		{"no credit", false, func(t *testing.T, de *artemis.DeliveryError) {
			assert.Contains(t, de.Error(), "no outcome within 1s", "the report says the write timed out")
			var ae *amqp.Error
			require.ErrorAs(t, de, &ae, "go-amqp's error: %v", de)
			assert.Equal(t, amqp.ErrCondTransferLimitExceeded, ae.Condition, "still waiting for link credit")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, conn, q := onBroker(t)
			tiny := brokertest.TinyDLQ()
			const urn = "urn:babel:orders:created"
			var dlq *amqp.Sender
			if tc.attachFirst {
				dlq = conn.NewSender(tiny)
			}
			filler := &amqp.Message{Value: "filler", Properties: &amqp.MessageProperties{MessageID: "filler"}}
			conn.Send(tiny, filler) // the first message fits; the address is now full
			if !tc.attachFirst {
				dlq = conn.NewSender(tiny)
			}

			ru := startDeadLetterRun(t, conn, q, urn, dlq)
			errs, calls := ru.errs, ru.calls
			de := ru.nextFailedWrite(t)
			assert.Equal(t, ru.env.Meta.ID, de.MessageID)
			var ge *gatewayError
			assert.ErrorAs(t, de, &ge, "the handler's failure is kept as the cause")
			tc.check(t, de)

			// The source comes back after the retry delay with its delivery
			// count unchanged: a plain release is not a failed delivery.
			ru.assertUncountedRedelivery(t)

			// Make room: take the filler off the DLQ; a later write goes through.
			r := conn.NewReceiver(tiny, nil)
			first := conn.Receive(r, arrival)
			require.NotNil(t, first)
			assert.Equal(t, "filler", first.Properties.MessageID)
			conn.Accept(r, first)
			dlqMsg := conn.Receive(r, arrival)
			require.NotNil(t, dlqMsg, "dead-lettered once the DLQ had room")
			conn.Accept(r, dlqMsg)
			conn.CloseReceiver(r)

			// Every report until then was a failed write; then the dead-lettering.
			for {
				de := errs.next(t)
				if errors.Is(de, artemis.ErrDeadLetterFailed) {
					assert.Equal(t, artemis.DispositionReleased, de.Disposition)
					continue
				}
				assert.ErrorIs(t, de, artemis.ErrHandlerFailed)
				assert.Equal(t, artemis.DispositionDeadLettered, de.Disposition)
				break
			}
			ru.l.stop()
			for len(calls) > 0 {
				assert.Equal(t, call{0, 0}, <-calls, "every redelivery after a failed write is uncounted")
			}

			body := valueString(t, dlqMsg)
			dl, err := artemis.Decode([]byte(body))
			require.NoError(t, err)
			require.NotNil(t, dl.DeadLetter)
			assert.Equal(t, wantDeadLetterBody(t, ru.original, dl, ptr("payment gateway timeout"), ptr("*integration_test.gatewayError"), "failed", q, 0), body)
			assertNothingLeft(t, errs, conn, q, tiny)
		})
	}
}

// TestIntegrationDeadLetterLinkClosed dead-letters through a sender whose
// link was closed before use: the write fails with a link error and the
// source message stays on its queue, uncounted.
func TestIntegrationDeadLetterLinkClosed(t *testing.T) {
	_, conn, q := onBroker(t)
	const urn = "urn:babel:orders:created"
	dlq := conn.NewSender(q + ".dlq")
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.OpTimeout)
	defer cancel()
	require.NoError(t, dlq.Close(ctx))

	ru := startDeadLetterRun(t, conn, q, urn, dlq)
	de := ru.nextFailedWrite(t)
	var le *amqp.LinkError
	assert.ErrorAs(t, de, &le, "a closed link: %v", de)
	ru.assertUncountedRedelivery(t)
	ru.l.stop()
	for len(ru.errs.ch) > 0 {
		assert.ErrorIs(t, <-ru.errs.ch, artemis.ErrDeadLetterFailed)
	}

	left := conn.Drain(q, "")
	require.Len(t, left, 1, "the message is still on its queue")
	assert.Equal(t, ru.env.Meta.ID, left[0].Properties.MessageID)
	assert.Equal(t, ru.original, valueString(t, left[0]))
	assert.Equal(t, uint32(0), left[0].Header.DeliveryCount, "never counted as a failed delivery")
	assertEmpty(t, conn, q+".dlq")
}
