package integration_test

// Settlement on the wire: redelivery through Artemis's delivery-count, the
// dead-letter queue, scheduled delivery, the version gate, poison records
// and the unknown-URN strategies.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
)

// TestIntegrationRedeliveryCountsAttempts fails twice and then succeeds:
// Artemis's delivery-count gives the handler attempts 0, 1 and 2.
func TestIntegrationRedeliveryCountsAttempts(t *testing.T) {
	_, conn, q, pub := onBrokerPublisher(t)
	const urn = "urn:babel:orders:created"

	calls := make(chan call, 16)
	errs := newErrorLog()
	n := 0
	cons := testkit.MustConsumer(t, artemis.Handlers{urn: recordCalls(calls, func() error {
		n++
		if n <= 2 {
			return &gatewayError{}
		}
		return nil
	})}, artemis.WithDeadLetterSender(conn.NewSender(q+".dlq")), artemis.WithOnError(errs.onError))
	env, _ := publishEnvelope(t, pub, q, urn)
	l := listen(t, conn, q, cons, 1)

	for want := range 3 {
		c := nextCall(t, calls)
		assert.Equal(t, call{want, uint32(want)}, c, "delivery %d: attempts and delivery-count", want)
	}
	for want := range 2 {
		de := errs.next(t)
		assert.ErrorIs(t, de, artemis.ErrHandlerFailed)
		assert.Equal(t, artemis.DispositionAbandoned, de.Disposition, "modified with delivery-failed")
		assert.Equal(t, want, de.Attempts)
		assert.Equal(t, env.Meta.ID, de.MessageID)
	}
	l.stop()
	select {
	case c := <-calls:
		t.Errorf("a fourth delivery: %+v", c)
	default:
	}
	assertNothingLeft(t, errs, conn, q, q+".dlq")
}

// TestIntegrationRedeliveryEndsOnTheDeadLetterQueue always fails: after
// maxTries (3) deliveries the envelope is on <queue>.dlq with the block,
// and the source queue is empty.
func TestIntegrationRedeliveryEndsOnTheDeadLetterQueue(t *testing.T) {
	_, conn, q, pub := onBrokerPublisher(t)
	const urn = "urn:babel:orders:created"

	calls := make(chan call, 16)
	errs := newErrorLog()
	cons := testkit.MustConsumer(t, artemis.Handlers{urn: recordCalls(calls, func() error { return &gatewayError{} })},
		artemis.WithDeadLetterSender(conn.NewSender(q+".dlq")), artemis.WithOnError(errs.onError))
	start := time.Now().UnixMilli()
	env, original := publishEnvelope(t, pub, q, urn)
	l := listen(t, conn, q, cons, 1)

	dlqMsg := receiveOn(t, conn, q+".dlq", nil)
	end := time.Now().UnixMilli()
	for want := range 3 {
		assert.Equal(t, call{want, uint32(want)}, nextCall(t, calls), "delivery %d", want)
	}
	for i, want := range []artemis.Disposition{artemis.DispositionAbandoned, artemis.DispositionAbandoned, artemis.DispositionDeadLettered} {
		de := errs.next(t)
		assert.ErrorIs(t, de, artemis.ErrHandlerFailed)
		assert.Equal(t, want, de.Disposition, "report %d", i)
		assert.Equal(t, i, de.Attempts, "report %d", i)
		var ge *gatewayError
		assert.ErrorAs(t, de, &ge, "the handler's error is the cause")
	}
	l.stop()

	body := valueString(t, dlqMsg)
	dl, err := artemis.Decode([]byte(body))
	require.NoError(t, err)
	require.NotNil(t, dl.DeadLetter)
	assert.Equal(t, wantDeadLetterBody(t, original, dl, ptr("payment gateway timeout"), ptr("*integration_test.gatewayError"), "failed", q, 2), body,
		"the DLQ copy: the original envelope, attempts 2 and the dead_letter block")
	assert.Equal(t, "failed", dl.DeadLetter.Reason)
	assert.Equal(t, q, dl.DeadLetter.OriginalQueue)
	assert.Equal(t, 2, dl.DeadLetter.Attempts, "the reconciled attempts of the failing delivery")
	assert.Equal(t, 2, dl.Attempts)
	assert.GreaterOrEqual(t, dl.DeadLetter.FailedAt, start)
	assert.LessOrEqual(t, dl.DeadLetter.FailedAt, end)

	// The copy carries the section 2 projection, so a JMS peer can route it.
	assert.Equal(t, urn, dlqMsg.Annotations[artemis.AnnotationJMSType])
	assert.Equal(t, env.TraceID, dlqMsg.Properties.CorrelationID)
	assert.Equal(t, env.Meta.ID, dlqMsg.Properties.MessageID)
	assert.Equal(t, "2", dlqMsg.ApplicationProperties["bq_attempts"])
	assert.Equal(t, "1", dlqMsg.ApplicationProperties["bq_schema_version"])

	select {
	case c := <-calls:
		t.Errorf("a fourth delivery: %+v", c)
	default:
	}
	assertNothingLeft(t, errs, conn, q)
}

// TestIntegrationScheduledDelivery publishes with WithDelay(3s): Artemis
// holds the message until then.
func TestIntegrationScheduledDelivery(t *testing.T) {
	_, conn, q, pub := onBrokerPublisher(t)
	const delay = 3 * time.Second
	const margin = 7 * time.Second

	r := conn.NewReceiver(q, nil)
	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	before := time.Now()
	id, err := pub.Publish(ctx, artemis.Job("urn:babel:orders:created", nil), artemis.WithDelay(delay))
	require.NoError(t, err)

	msg := conn.Receive(r, delay+margin)
	elapsed := time.Since(before)
	require.NotNil(t, msg, "not received within %v", delay+margin)
	conn.Accept(r, msg)
	conn.CloseReceiver(r)
	assert.GreaterOrEqual(t, elapsed, delay-500*time.Millisecond, "received before the scheduled time")
	assert.Equal(t, id, msg.Properties.MessageID)
	at, ok := msg.Annotations[artemis.AnnotationDeliveryTime].(int64)
	if assert.True(t, ok, "x-opt-delivery-time is an AMQP long: %#v", msg.Annotations) {
		assert.InDelta(t, before.Add(delay).UnixMilli(), at, float64(elapsed.Milliseconds()), "now + delay")
	}
	t.Logf("scheduled for %v, received after %v", delay, elapsed)
}

// TestIntegrationVersionGate sends bq_schema_version "2": the message is
// forwarded to the DLQ as received, never reaches a handler and is not
// retried.
func TestIntegrationVersionGate(t *testing.T) {
	for _, tc := range []struct {
		name string
		data bool // a data section instead of an AMQP value string
	}{
		{"value string", false},
		{"data section", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, conn, q := onBroker(t)
			const urn = "urn:babel:orders:created"
			env, err := artemis.NewEnvelope(urn, json.RawMessage(`{"order_id":1042}`), artemis.EnvelopeQueue(q))
			require.NoError(t, err)
			msg, err := artemis.NewMessage(env)
			require.NoError(t, err)
			body := strings.Replace(valueString(t, msg), `"schema_version":1`, `"schema_version":2`, 1)
			msg.ApplicationProperties["bq_schema_version"] = "2"
			if tc.data {
				msg.Value, msg.Data = nil, [][]byte{[]byte(body)}
			} else {
				msg.Value = body
			}
			conn.Send(q, msg)

			calls := make(chan call, 4)
			errs := newErrorLog()
			cons := testkit.MustConsumer(t, artemis.Handlers{urn: recordCalls(calls, func() error { return nil })},
				artemis.WithDeadLetterSender(conn.NewSender(q+".dlq")), artemis.WithOnError(errs.onError))
			l := listen(t, conn, q, cons, 1)

			fwd := receiveOn(t, conn, q+".dlq", nil)
			de := errs.next(t)
			l.stop()
			assert.ErrorIs(t, de, artemis.ErrVersionGated)
			assert.Equal(t, artemis.DispositionDeadLettered, de.Disposition)
			select {
			case c := <-calls:
				t.Errorf("the handler was called: %+v", c)
			default:
			}

			if tc.data {
				assert.Nil(t, fwd.Value, "still a data section")
				require.Len(t, fwd.Data, 1)
				assert.Equal(t, body, string(fwd.Data[0]), "byte for byte")
			} else {
				assert.Equal(t, body, valueString(t, fwd), "byte for byte")
			}
			assert.Equal(t, "2", fwd.ApplicationProperties["bq_schema_version"])
			assert.Equal(t, urn, fwd.Annotations[artemis.AnnotationJMSType])
			assert.Equal(t, env.TraceID, fwd.Properties.CorrelationID)
			assert.Equal(t, env.Meta.ID, fwd.Properties.MessageID)
			assertNothingLeft(t, errs, conn, q, q+".dlq")
		})
	}
}

// TestIntegrationPoisonRecords sends bodies that are not envelopes: each
// lands on the DLQ as its poison record, never reaching a handler.
func TestIntegrationPoisonRecords(t *testing.T) {
	_, conn, q := onBroker(t)
	invalid := []byte{0xff, 0xfe, 'B', 'Q'}
	cases := []struct {
		id     string
		msg    *amqp.Message
		prefix string
	}{
		{"poison-text", &amqp.Message{Value: "not json, just text"},
			`{"raw":"not json, just text","dead_letter":{"reason":"poison","error":"`},
		{"poison-bytes", &amqp.Message{Data: [][]byte{invalid}},
			`{"raw":"` + base64.StdEncoding.EncodeToString(invalid) + `","raw_encoding":"base64","dead_letter":{"reason":"poison","error":"`},
		{"poison-array", &amqp.Message{Value: `[1,2,3]`},
			`{"raw":"[1,2,3]","dead_letter":{"reason":"poison","error":"`},
	}
	for _, c := range cases {
		c.msg.Properties = &amqp.MessageProperties{MessageID: c.id}
		conn.Send(q, c.msg)
	}

	calls := make(chan call, 4)
	errs := newErrorLog()
	cons := testkit.MustConsumer(t, artemis.Handlers{"urn:babel:orders:created": func(context.Context, *artemis.Envelope, *amqp.Message) error {
		calls <- call{}
		return nil
	}}, artemis.WithDeadLetterSender(conn.NewSender(q+".dlq")), artemis.WithOnError(errs.onError))
	l := listen(t, conn, q, cons, 1)

	got := map[any]*amqp.Message{}
	r := conn.NewReceiver(q+".dlq", &brokertest.ReceiverOptions{Credit: 3})
	for range cases {
		m := conn.Receive(r, arrival)
		require.NotNil(t, m, "poison records on the DLQ: %d of %d", len(got), len(cases))
		conn.Accept(r, m)
		got[m.Properties.MessageID] = m
	}
	conn.CloseReceiver(r)
	for range cases {
		de := errs.next(t)
		assert.ErrorIs(t, de, artemis.ErrPoison)
		assert.Equal(t, artemis.DispositionDeadLettered, de.Disposition)
	}
	l.stop()
	select {
	case <-calls:
		t.Error("a handler was called")
	default:
	}

	for _, c := range cases {
		t.Run(c.id, func(t *testing.T) {
			m := got[c.id]
			require.NotNil(t, m, "no record for %s", c.id)
			record := valueString(t, m)
			assert.True(t, strings.HasPrefix(record, c.prefix), "record %s\nwant prefix %s", record, c.prefix)
			require.True(t, json.Valid([]byte(record)), "the record parses: %s", record)
			var parsed struct {
				DeadLetter map[string]any `json:"dead_letter"`
			}
			require.NoError(t, json.Unmarshal([]byte(record), &parsed))
			dl := parsed.DeadLetter
			assert.Equal(t, "poison", dl["reason"])
			assert.Nil(t, dl["exception"])
			assert.Equal(t, q, dl["original_queue"])
			assert.Equal(t, 0.0, dl["attempts"])
			assert.Equal(t, "go", dl["lang"])
			failedAt, _ := dl["failed_at"].(float64)
			assert.True(t, strings.HasSuffix(record, fmt.Sprintf(`,"failed_at":%d,"original_queue":%q,"attempts":0,"lang":"go"}}`, int64(failedAt), q)),
				"record %s ends with the rest of the block", record)
			if assert.NotNil(t, m.Properties.ContentType) {
				assert.Equal(t, "application/json", *m.Properties.ContentType)
			}
		})
	}
	assertNothingLeft(t, errs, conn, q)
}

// TestIntegrationUnknownURN runs each unknown-URN strategy against the
// broker. fail and release redeliver through Artemis until its
// max-delivery-attempts (10) moves the message to the broker's DLQ.
func TestIntegrationUnknownURN(t *testing.T) {
	const known = "urn:babel:orders:created"
	const unknown = "urn:babel:orders:nobody-listens"

	// setup publishes the unknown message, then a known one behind it, and
	// listens with strategy s. It returns the unknown envelope, its body,
	// and a channel that fires when the known message is handled.
	type run struct {
		conn     *brokertest.Conn
		q        string
		env      *artemis.Envelope
		original string
		handled  chan struct{}
		errs     *errorLog
		l        *listener
	}
	setup := func(t *testing.T, s artemis.UnknownURNStrategy) *run {
		_, conn, q := onBroker(t)
		ru := &run{conn: conn, q: q, handled: make(chan struct{}, 1), errs: newErrorLog()}
		pub := artemis.NewPublisher(ru.conn.NewSender(ru.q), ru.q)
		ru.env, ru.original = publishEnvelope(t, pub, ru.q, unknown)
		publishEnvelope(t, pub, ru.q, known)
		cons := testkit.MustConsumer(t, artemis.Handlers{known: func(context.Context, *artemis.Envelope, *amqp.Message) error {
			ru.handled <- struct{}{}
			return nil
		}}, artemis.WithUnknownURN(s), artemis.WithDeadLetterSender(ru.conn.NewSender(ru.q+".dlq")),
			artemis.WithOnError(ru.errs.onError))
		ru.l = listen(t, ru.conn, ru.q, cons, 1)
		return ru
	}
	waitHandled := func(t *testing.T, ru *run) {
		t.Helper()
		select {
		case <-ru.handled:
		case <-time.After(arrival):
			t.Fatalf("the known message was not handled within %v", arrival)
		}
	}
	// onBrokerDLQ finds this test's message on Artemis's own DLQ by its
	// correlation-id (other tests put messages there too).
	onBrokerDLQ := func(t *testing.T, ru *run, wait time.Duration) *amqp.Message {
		t.Helper()
		r := ru.conn.NewReceiver("DLQ", &brokertest.ReceiverOptions{Selector: "JMSCorrelationID = '" + ru.env.TraceID + "'"})
		defer ru.conn.CloseReceiver(r)
		m := ru.conn.Receive(r, wait)
		if m != nil {
			ru.conn.Accept(r, m)
		}
		return m
	}

	t.Run("delete", func(t *testing.T) {
		ru := setup(t, artemis.UnknownURNDelete)
		waitHandled(t, ru)
		ru.l.stop()
		assertNothingLeft(t, ru.errs, ru.conn, ru.q, ru.q+".dlq")
		if m := onBrokerDLQ(t, ru, quiet); m != nil {
			t.Errorf("a deleted message is on the broker's DLQ: %s", bodyOf(m))
		}
	})

	t.Run("dead_letter", func(t *testing.T) {
		ru := setup(t, artemis.UnknownURNDeadLetter)
		dlqMsg := receiveOn(t, ru.conn, ru.q+".dlq", nil)
		waitHandled(t, ru)
		de := ru.errs.next(t)
		ru.l.stop()
		assert.ErrorIs(t, de, artemis.ErrUnknownURN)
		assert.Equal(t, artemis.DispositionDeadLettered, de.Disposition)
		assert.Equal(t, unknown, de.URN)

		body := valueString(t, dlqMsg)
		dl, err := artemis.Decode([]byte(body))
		require.NoError(t, err)
		require.NotNil(t, dl.DeadLetter)
		assert.Equal(t, wantDeadLetterBody(t, ru.original, dl, ptr(`no handler is registered for "`+unknown+`"`), nil, "unknown_urn", ru.q, 0), body)
		assert.Equal(t, unknown, dlqMsg.Annotations[artemis.AnnotationJMSType])
		assert.Equal(t, ru.env.Meta.ID, dlqMsg.Properties.MessageID)
		assertNothingLeft(t, ru.errs, ru.conn, ru.q)
	})

	for _, s := range []artemis.UnknownURNStrategy{artemis.UnknownURNFail, artemis.UnknownURNRelease} {
		t.Run(string(s), func(t *testing.T) {
			ru := setup(t, s)
			m := onBrokerDLQ(t, ru, arrival)
			require.NotNil(t, m, "not on the broker's DLQ within %v", arrival)
			waitHandled(t, ru)
			ru.l.stop()
			assert.Equal(t, ru.original, valueString(t, m), "the message as published")
			assert.Equal(t, ru.env.Meta.ID, m.Properties.MessageID)
			if s == artemis.UnknownURNFail {
				for want := range 10 {
					de := ru.errs.next(t)
					assert.ErrorIs(t, de, artemis.ErrUnknownURN)
					assert.Equal(t, artemis.DispositionAbandoned, de.Disposition)
					assert.Equal(t, want, de.Attempts, "delivery %d counted by Artemis", want)
				}
			}
			assertNothingLeft(t, ru.errs, ru.conn, ru.q, ru.q+".dlq")
			t.Logf("on DLQ: annotations %v", m.Annotations)
		})
	}
}
