package artemis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewDeadLetter(t *testing.T) {
	at := fixedClock
	dl := newDeadLetter(ReasonFailed, &OutcomeError{State: &amqp.StateReleased{}}, "orders", 3, at)
	got := string(dl.appendJSON(nil))
	want := `{"reason":"failed","error":"babelqueue: broker released the transfer","exception":"*artemis.OutcomeError","failed_at":1749132727250,"original_queue":"orders","attempts":3,"lang":"go"}`
	if got != want {
		t.Errorf("block\n got: %s\nwant: %s", got, want)
	}
	// A panic's exception is the type of the panic value.
	dl = newDeadLetter(ReasonFailed, &PanicError{Value: "boom"}, "orders", 1, at)
	if dl.Exception == nil || *dl.Exception != "string" || dl.Error == nil || *dl.Error != "handler panicked: boom" {
		t.Errorf("panic block: %s", dl.appendJSON(nil))
	}
	dl = newDeadLetter(ReasonUnknownURN, nil, "", 0, at)
	if got := string(dl.appendJSON(nil)); got != `{"reason":"unknown_urn","error":null,"exception":null,"failed_at":1749132727250,"original_queue":"","attempts":0,"lang":"go"}` {
		t.Errorf("nil cause block: %s", got)
	}
}

func TestDeadLetterWriteMustBeAccepted(t *testing.T) {
	paths := []struct {
		name     string
		handlers Handlers
		strategy UnknownURNStrategy
		msg      func(t *testing.T) *amqp.Message
		kind     error
	}{
		{"failed at the limit", Handlers{urnCreated: failing(errors.New("boom"))}, UnknownURNFail,
			func(t *testing.T) *amqp.Message { return orderMessage(t, 2) }, ErrHandlerFailed},
		{"unknown URN", Handlers{}, UnknownURNDeadLetter,
			func(t *testing.T) *amqp.Message { return orderMessage(t, 0) }, ErrUnknownURN},
		{"poison", Handlers{urnCreated: succeeding}, UnknownURNFail,
			func(*testing.T) *amqp.Message { return rawMessage("not json") }, ErrPoison},
		{"gated", Handlers{urnCreated: succeeding}, UnknownURNFail,
			func(t *testing.T) *amqp.Message {
				m := orderMessage(t, 0)
				m.ApplicationProperties[PropSchemaVersion] = "2"
				return m
			}, ErrVersionGated},
	}
	for _, p := range paths {
		for _, o := range dlqOutcomes {
			t.Run(p.name+"/"+o.name, func(t *testing.T) {
				rec := newRecorder()
				dlq := &fakelink.Sender{Outcome: o.outcome}
				c := mustConsumer(t, p.handlers, WithOnError(rec.onError), WithDeadLetterSender(dlq),
					WithUnknownURN(p.strategy), WithDeadLetterTimeout(20*time.Millisecond), WithDeadLetterRetryDelay(0))
				got := handleOne(t, c, rec, dlq, p.msg(t))
				assert.Len(t, dlq.Sent(), 1, "exactly one DLQ write per delivery")
				if o.ok {
					assert.Equal(t, fakelink.Accepted, got.disp)
					require.Len(t, got.reports, 1)
					assert.ErrorIs(t, got.reports[0].err, p.kind)
					var de *DeliveryError
					require.ErrorAs(t, got.reports[0].err, &de)
					assert.Equal(t, DeadLettered, de.Disposition)
					return
				}
				assert.Equal(t, fakelink.Released, got.disp, "a failed DLQ write ends in a plain release, never an accept")
				require.Len(t, got.reports, 1)
				err := got.reports[0].err
				assert.ErrorIs(t, err, ErrDeadLetterFailed)
				var de *DeliveryError
				require.ErrorAs(t, err, &de)
				assert.Equal(t, Released, de.Disposition)
				switch o.name {
				case "timed out":
					assert.Contains(t, err.Error(), "no outcome within 20ms")
					assert.ErrorIs(t, err, context.DeadlineExceeded)
				case "link closed":
					var le *amqp.LinkError
					assert.ErrorAs(t, err, &le)
				default:
					assert.ErrorIs(t, err, ErrNotAccepted)
					var oe *OutcomeError
					assert.ErrorAs(t, err, &oe)
				}
			})
		}
	}
}

func TestDeadLetterToPlainSenderTrustsSend(t *testing.T) {
	// A Sender that cannot report outcomes is trusted when Send returns nil;
	// a rejected transfer still errors out of Send.
	rec := newRecorder()
	fs := &fakelink.Sender{Outcome: fakelink.Reject}
	c := mustConsumer(t, Handlers{}, WithOnError(rec.onError), WithDeadLetterSender(fakelink.PlainSender{S: fs}),
		WithUnknownURN(UnknownURNDeadLetter), WithDeadLetterRetryDelay(0))
	got := handleOne(t, c, rec, nil, orderMessage(t, 0))
	assert.Equal(t, fakelink.Released, got.disp)
}

func TestGatedBinaryBodyStaysBinary(t *testing.T) {
	body := []byte{0xff, 0x00, '{', '}'}
	for name, msg := range map[string]*amqp.Message{
		"data section": {Data: [][]byte{body}, ApplicationProperties: map[string]any{PropSchemaVersion: "2"}},
		"binary value": {Value: body, ApplicationProperties: map[string]any{PropSchemaVersion: "2"}},
		"sequence":     {Sequence: [][]any{{"a", int64(1)}}, ApplicationProperties: map[string]any{PropSchemaVersion: "2"}},
	} {
		t.Run(name, func(t *testing.T) {
			dlq := &fakelink.Sender{}
			c := mustConsumer(t, Handlers{}, WithDeadLetterSender(dlq))
			got := handleOne(t, c, newRecorder(), dlq, msg)
			assert.Equal(t, fakelink.Accepted, got.disp)
			require.Len(t, got.dlq, 1)
			assert.Equal(t, msg.Data, got.dlq[0].Data)
			assert.Equal(t, msg.Value, got.dlq[0].Value)
			assert.Equal(t, msg.Sequence, got.dlq[0].Sequence)
		})
	}
}

func TestForwardCopyDropsScheduling(t *testing.T) {
	msg := orderMessage(t, 3, WithDelay(time.Hour))
	msg.ApplicationProperties[PropSchemaVersion] = "2"
	msg.Annotations[AnnotationDeliveryDelay] = int64(5000)
	fwd := forwardCopy(msg, "orders")
	assert.NotContains(t, fwd.Annotations, AnnotationDeliveryTime)
	assert.NotContains(t, fwd.Annotations, AnnotationDeliveryDelay)
	assert.Equal(t, urnCreated, fwd.Annotations[AnnotationJMSType])
	assert.Equal(t, uint32(0), fwd.Header.DeliveryCount)
	assert.True(t, fwd.Header.Durable)
	assert.Contains(t, msg.Annotations, AnnotationDeliveryTime, "the source message is not modified")
}

func TestOriginalQueue(t *testing.T) {
	dlq := &fakelink.Sender{}
	c := mustConsumer(t, Handlers{urnCreated: failing(errors.New("x"))}, WithDeadLetterSender(dlq), WithQueue("billing"))
	got := handleOne(t, c, newRecorder(), dlq, orderMessage(t, 2))
	require.Len(t, got.dlq, 1)
	assert.Equal(t, "billing", dlqEnvelope(t, got.dlq[0]).DeadLetter.OriginalQueue)
	assert.Equal(t, "billing.dlq", *got.dlq[0].Properties.To)
}

func TestUnknownKeysSurviveTheDeadLetterCopy(t *testing.T) {
	body := `{"job":"urn:babel:orders:created","trace_id":"t-1","data":{"big":123456789012345678901234567890,"s":"<é>"},"meta":{"id":"m-1","queue":"orders","lang":"java","schema_version":1,"created_at":1749132727000,"tenant":"acme"},"attempts":1,"x_custom":{"k":[1,2]}}`
	dlq := &fakelink.Sender{}
	c := mustConsumer(t, Handlers{urnCreated: failing(errors.New("x"))}, WithDeadLetterSender(dlq), WithMaxTries(2))
	got := handleOne(t, c, newRecorder(), dlq, rawMessage(body))
	require.Len(t, got.dlq, 1)
	rec := got.dlq[0].Value.(string)
	want := `{"job":"urn:babel:orders:created","trace_id":"t-1","data":{"big":123456789012345678901234567890,"s":"<é>"},"meta":{"id":"m-1","queue":"orders","lang":"java","schema_version":1,"created_at":1749132727000,"tenant":"acme"},"attempts":1,"x_custom":{"k":[1,2]},"dead_letter":{"reason":"failed","error":"x","exception":"*errors.errorString","failed_at":`
	assert.True(t, strings.HasPrefix(rec, want), "got %s", rec)
}

func TestHeadersRideIntoTheDeadLetterCopy(t *testing.T) {
	msg := orderMessage(t, 2, WithHeaders(map[string]string{"traceparent": "00-aa-bb-01"}))
	dlq := &fakelink.Sender{}
	c := mustConsumer(t, Handlers{urnCreated: failing(errors.New("x"))}, WithDeadLetterSender(dlq))
	got := handleOne(t, c, newRecorder(), dlq, msg)
	require.Len(t, got.dlq, 1)
	assert.Equal(t, "00-aa-bb-01", got.dlq[0].ApplicationProperties["traceparent"])
	assert.Equal(t, "2", got.dlq[0].ApplicationProperties[PropAttempts])
}
