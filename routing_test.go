package artemis

import (
	"context"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRouting(t *testing.T) {
	t.Run("the annotation wins over the body URN", func(t *testing.T) {
		msg := orderMessage(t, 0)
		msg.Annotations[AnnotationJMSType] = "urn:babel:orders:shipped"
		var got string
		c := mustConsumer(t, Handlers{
			"urn:babel:orders:shipped": func(_ context.Context, e *Envelope, _ *amqp.Message) error { got = "shipped:" + e.URN; return nil },
			urnCreated:                 func(context.Context, *Envelope, *amqp.Message) error { got = "created"; return nil },
		})
		handleOne(t, c, newRecorder(), nil, msg)
		assert.Equal(t, "shipped:"+urnCreated, got)
	})
	t.Run("the subject routes when the annotation is absent (a JMS producer's JMSType)", func(t *testing.T) {
		msg := orderMessage(t, 0)
		delete(msg.Annotations, AnnotationJMSType)
		shipped := "urn:babel:orders:shipped"
		msg.Properties.Subject = &shipped
		var got string
		c := mustConsumer(t, Handlers{
			shipped:    func(context.Context, *Envelope, *amqp.Message) error { got = "shipped"; return nil },
			urnCreated: func(context.Context, *Envelope, *amqp.Message) error { got = "created"; return nil },
		})
		handleOne(t, c, newRecorder(), nil, msg)
		assert.Equal(t, "shipped", got)
	})
	for name, ann := range map[string]any{"absent": nil, "blank": "  ", "not a string": int64(7), "binary": []byte(urnCreated)} {
		t.Run("falls back to the body URN when the annotation is "+name, func(t *testing.T) {
			msg := orderMessage(t, 0)
			msg.Properties.Subject = nil
			if ann == nil {
				delete(msg.Annotations, AnnotationJMSType)
			} else {
				msg.Annotations[AnnotationJMSType] = ann
			}
			called := false
			c := mustConsumer(t, Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error { called = true; return nil }})
			got := handleOne(t, c, newRecorder(), nil, msg)
			assert.True(t, called)
			assert.Equal(t, fakelink.Accepted, got.disp)
		})
	}
	t.Run("the urn alias routes when job is absent", func(t *testing.T) {
		msg := rawMessage(`{"urn":"urn:babel:orders:created","trace_id":"t-1","data":{},"meta":{"id":"m-1","queue":"orders","lang":"node","schema_version":1,"created_at":1},"attempts":0}`)
		var job string
		c := mustConsumer(t, Handlers{urnCreated: func(_ context.Context, e *Envelope, _ *amqp.Message) error { job = e.URN; return nil }})
		got := handleOne(t, c, newRecorder(), nil, msg)
		assert.Equal(t, fakelink.Accepted, got.disp)
		assert.Equal(t, urnCreated, job)
	})
	t.Run("binary and data-section bodies decode", func(t *testing.T) {
		for _, mk := range []func(string) *amqp.Message{
			func(s string) *amqp.Message { return &amqp.Message{Value: []byte(s)} },
			func(s string) *amqp.Message { return &amqp.Message{Data: [][]byte{[]byte(s)}} },
			func(s string) *amqp.Message { return &amqp.Message{Data: [][]byte{[]byte(s[:10]), []byte(s[10:])}} },
		} {
			body := orderMessage(t, 0).Value.(string)
			called := false
			c := mustConsumer(t, Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error { called = true; return nil }})
			got := handleOne(t, c, newRecorder(), nil, mk(body))
			assert.True(t, called)
			assert.Equal(t, fakelink.Accepted, got.disp)
		}
	})
}

// TestUnknownURNDoesNotDecode proves that a message routed by its
// x-opt-jms-type to the unknown-URN strategy is settled without its body
// being read: a poison body (bad JSON, invalid UTF-8, a sequence section) is
// handled exactly as the strategy says and never reported as poison.
func TestUnknownURNDoesNotDecode(t *testing.T) {
	bodies := map[string]func(m *amqp.Message){
		"bad JSON":       func(m *amqp.Message) { m.Value = benchPoisonBody },
		"invalid UTF-8":  func(m *amqp.Message) { m.Value = nil; m.Data = [][]byte{{0xff, 0xfe, '{'}} },
		"sequence body":  func(m *amqp.Message) { m.Value = nil; m.Sequence = [][]any{{"a"}} },
		"no body at all": func(m *amqp.Message) { m.Value = nil },
	}
	strategies := []struct {
		strategy UnknownURNStrategy
		want     fakelink.Disposition
		reported bool
	}{
		{UnknownURNFail, fakelink.Failed, true},
		{UnknownURNRelease, fakelink.Failed, false},
		{UnknownURNDelete, fakelink.Accepted, false},
	}
	for name, setBody := range bodies {
		for _, s := range strategies {
			t.Run(name+"/"+string(s.strategy), func(t *testing.T) {
				var reports []error
				dlq := &fakelink.Sender{}
				c := mustConsumer(t, Handlers{benchURN: benchAcceptOrder}, WithUnknownURN(s.strategy), WithDeadLetterSender(dlq),
					WithOnError(func(_ context.Context, err error, env *Envelope, _ *amqp.Message) {
						assert.Nil(t, env, "no envelope was decoded")
						reports = append(reports, err)
					}))
				msg := benchDelivery(t, benchUnknown)
				setBody(msg)
				r := fakelink.NewReceiver(t, benchQueue)
				r.Track(msg)
				ret := c.Handle(context.Background(), r, msg)

				disp, ok := r.Disposition(msg)
				require.True(t, ok, "the delivery was not settled")
				assert.Equal(t, s.want, disp)
				assert.Empty(t, dlq.Sent(), "nothing goes to the DLQ")
				if s.reported {
					require.Len(t, reports, 1)
					assert.ErrorIs(t, reports[0], ErrUnknownURN)
					assert.NotErrorIs(t, reports[0], ErrPoison)
					assert.ErrorIs(t, ret, ErrUnknownURN)
				} else {
					assert.Empty(t, reports)
					assert.NoError(t, ret)
				}
			})
		}
	}
}

func TestHostileNonStringJMSType(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value any
	}{
		{"int", int64(42)},
		{"int32", int32(7)},
		{"binary naming another URN", []byte("urn:babel:orders:paid")},
		{"list naming another URN", []any{"urn:babel:orders:paid"}},
		{"map", map[string]any{"urn": "urn:babel:orders:paid"}},
		{"bool", true},
		{"null", nil},
		{"blank string", "  \t"},
	} {
		t.Run(tc.name+": routed on the body URN", func(t *testing.T) {
			msg := orderMessage(t, 0)
			msg.Annotations[AnnotationJMSType] = tc.value
			var urn string
			rec := newRecorder()
			dlq := &fakelink.Sender{}
			c := mustConsumer(t, Handlers{
				urnCreated: func(_ context.Context, env *Envelope, _ *amqp.Message) error {
					urn = env.URN
					return nil
				},
				"urn:babel:orders:paid": neverCalled(t),
			}, WithOnError(rec.onError), WithDeadLetterSender(dlq))
			got := handleOne(t, c, rec, dlq, msg)
			assert.Equal(t, fakelink.Accepted, got.disp)
			assert.Empty(t, got.reports)
			assert.NoError(t, got.ret)
			assert.Equal(t, urnCreated, urn)
		})
	}
}

func TestDeliveryCountAndRoutingURN(t *testing.T) {
	if got := deliveryCount(&amqp.Message{}); got != 0 {
		t.Errorf("deliveryCount without a header = %d", got)
	}
	if got := deliveryCount(&amqp.Message{Header: &amqp.MessageHeader{DeliveryCount: 4}}); got != 4 {
		t.Errorf("deliveryCount = %d, want 4", got)
	}
	subject := func(s string) *string { return &s }
	tests := []struct {
		name    string
		ann     amqp.Annotations
		subject *string
		want    string
	}{
		{"no annotations", nil, nil, ""},
		{"subject when the annotation is absent", nil, subject("urn:jms:type"), "urn:jms:type"},
		{"the annotation wins over the subject", amqp.Annotations{AnnotationJMSType: "urn:a:b"}, subject("urn:jms:type"), "urn:a:b"},
		{"subject when the annotation is blank", amqp.Annotations{AnnotationJMSType: " "}, subject("urn:jms:type"), "urn:jms:type"},
		{"blank subject", nil, subject(" \t"), ""},
		{"absent", amqp.Annotations{"x-opt-other": "urn:a:b"}, nil, ""},
		{"string", amqp.Annotations{AnnotationJMSType: "urn:a:b"}, nil, "urn:a:b"},
		{"blank", amqp.Annotations{AnnotationJMSType: "  "}, nil, ""},
		{"not a string", amqp.Annotations{AnnotationJMSType: int64(1)}, nil, ""},
		{"symbol is not a string", amqp.Annotations{AnnotationJMSType: amqp.Symbol("urn:a:b")}, nil, ""},
	}
	for _, tt := range tests {
		msg := &amqp.Message{Annotations: tt.ann}
		if tt.subject != nil {
			msg.Properties = &amqp.MessageProperties{Subject: tt.subject}
		}
		if got := routingURN(msg); got != tt.want {
			t.Errorf("%s: routingURN = %q, want %q", tt.name, got, tt.want)
		}
	}
}
