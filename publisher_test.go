package artemis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// sentEnvelope decodes and validates the body of a message a fake sender saw.
func sentEnvelope(t *testing.T, msg *amqp.Message) *Envelope {
	t.Helper()
	body, ok := msg.Value.(string)
	if !ok {
		t.Fatalf("sent body is a %T", msg.Value)
	}
	env, err := decodeValidate(body)
	if err != nil {
		t.Fatalf("sent body %s: %v", body, err)
	}
	return env
}

func TestPublisherPublish(t *testing.T) {
	ctx := context.Background()

	t.Run("accepted returns meta.id", func(t *testing.T) {
		s := &fakelink.Sender{Outcome: fakelink.Accept}
		p := NewPublisher(s, "orders")
		before := time.Now().UnixMilli()
		id, err := p.Publish(ctx, Job(" urn:babel:orders:created ", orderCreated{OrderID: 1042, Customer: "ACME"}))
		if err != nil {
			t.Fatal(err)
		}
		sent := s.Sent()
		if len(sent) != 1 || len(s.Kept()) != 1 {
			t.Fatalf("sent %d, kept %d; want 1, 1", len(sent), len(s.Kept()))
		}
		env := sentEnvelope(t, sent[0])
		assertUUIDv4(t, "returned id", id)
		assertUUIDv4(t, "trace_id", env.TraceID)
		if env.Meta.ID != id || sent[0].Properties.MessageID != id {
			t.Errorf("returned id %q, body meta.id %q, message-id %v", id, env.Meta.ID, sent[0].Properties.MessageID)
		}
		if env.URN != "urn:babel:orders:created" || env.Meta.Queue != "orders" || env.Meta.Lang != "go" ||
			env.Attempts != 0 || string(env.Data) != `{"order_id":1042,"customer":"ACME"}` || env.Meta.CreatedAt < before {
			t.Errorf("sent envelope %+v", env)
		}
		if sent[0].Properties.CorrelationID != env.TraceID {
			t.Errorf("correlation-id %v, trace_id %q", sent[0].Properties.CorrelationID, env.TraceID)
		}
		// The sent message is exactly the projection of its own envelope.
		if want := mustMessage(t, env); !reflect.DeepEqual(sent[0], want) {
			t.Errorf("sent message is not NewMessage(envelope):\n%s\nwant\n%s", renderMessage(t, sent[0]), renderMessage(t, want))
		}
	})

	t.Run("nil outcome func accepts", func(t *testing.T) {
		s := &fakelink.Sender{}
		if _, err := NewPublisher(s, "q").Publish(ctx, Job("urn:a:b", nil)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("trace id reuse", func(t *testing.T) {
		s := &fakelink.Sender{}
		id, err := NewPublisher(s, "orders").Publish(ctx, Job("urn:a:b", nil, EnvelopeTraceID("  "+contractTraceID+"\t")))
		if err != nil {
			t.Fatal(err)
		}
		env := sentEnvelope(t, s.Sent()[0])
		if env.TraceID != contractTraceID || s.Sent()[0].Properties.CorrelationID != contractTraceID {
			t.Errorf("trace_id %q correlation-id %v, want %q", env.TraceID, s.Sent()[0].Properties.CorrelationID, contractTraceID)
		}
		if id == contractTraceID {
			t.Errorf("meta.id equals the reused trace id")
		}
	})

	t.Run("blank trace id mints one", func(t *testing.T) {
		s := &fakelink.Sender{}
		if _, err := NewPublisher(s, "orders").Publish(ctx, Job("urn:a:b", nil, EnvelopeTraceID("   "))); err != nil {
			t.Fatal(err)
		}
		assertUUIDv4(t, "trace_id", sentEnvelope(t, s.Sent()[0]).TraceID)
	})

	t.Run("publisher options apply before per-call options", func(t *testing.T) {
		s := &fakelink.Sender{}
		p := NewPublisher(s, "orders", WithDuplicateDetection(), WithHeaders(map[string]string{"a": "pub", "b": "pub"}))
		id, err := p.Publish(ctx, Job("urn:a:b", map[string]int{"n": 1}), WithHeaders(map[string]string{"b": "call"}), withClock(fixedClock), WithDelay(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		m := s.Sent()[0]
		if m.ApplicationProperties[PropDuplicateID] != id || m.ApplicationProperties["a"] != "pub" || m.ApplicationProperties["b"] != "call" {
			t.Errorf("application properties %v", m.ApplicationProperties)
		}
		if m.Annotations[AnnotationDeliveryTime] != fixedClock.Add(time.Second).UnixMilli() {
			t.Errorf("x-opt-delivery-time %v", m.Annotations[AnnotationDeliveryTime])
		}
	})

	for _, tt := range []struct {
		name    string
		outcome func(context.Context, *amqp.Message) (amqp.DeliveryState, error)
		state   amqp.DeliveryState
	}{
		{"rejected", fakelink.Reject, &amqp.StateRejected{}},
		{"released", fakelink.Release, &amqp.StateReleased{}},
		{"modified", fakelink.Modify, &amqp.StateModified{}},
	} {
		t.Run(tt.name+" is ErrNotAccepted", func(t *testing.T) {
			s := &fakelink.Sender{Outcome: tt.outcome}
			id, err := NewPublisher(s, "orders").Publish(ctx, Job("urn:a:b", nil))
			if id != "" {
				t.Errorf("returned id %q for an outcome other than accepted", id)
			}
			if !errors.Is(err, ErrNotAccepted) {
				t.Fatalf("error %v does not match ErrNotAccepted", err)
			}
			var oe *OutcomeError
			if !errors.As(err, &oe) || reflect.TypeOf(oe.State) != reflect.TypeOf(tt.state) {
				t.Fatalf("error %v: OutcomeError %+v, want state %T", err, oe, tt.state)
			}
			if !strings.Contains(err.Error(), tt.name) || !strings.Contains(err.Error(), "orders") || !strings.Contains(err.Error(), "urn:a:b") {
				t.Errorf("error %q does not say %s, the queue and the URN", err, tt.name)
			}
			var ae *amqp.Error
			if tt.name == "rejected" {
				if !errors.As(err, &ae) || ae.Condition != amqp.ErrCondResourceLimitExceeded {
					t.Errorf("rejected error does not unwrap to the broker's *amqp.Error: %v", err)
				}
			} else if errors.As(err, &ae) {
				t.Errorf("%s error unwraps to an *amqp.Error %v", tt.name, ae)
			}
			if len(s.Sent()) != 1 || len(s.Kept()) != 0 {
				t.Errorf("sent %d kept %d", len(s.Sent()), len(s.Kept()))
			}
		})
	}

	t.Run("link closed", func(t *testing.T) {
		s := &fakelink.Sender{Outcome: fakelink.Closed}
		id, err := NewPublisher(s, "orders").Publish(ctx, Job("urn:a:b", nil))
		var le *amqp.LinkError
		if id != "" || !errors.As(err, &le) {
			t.Errorf("Publish = %q, %v; want an *amqp.LinkError", id, err)
		}
		if errors.Is(err, ErrNotAccepted) {
			t.Errorf("a closed link is not a broker outcome: %v", err)
		}
	})

	t.Run("no outcome before the deadline", func(t *testing.T) {
		s := &fakelink.Sender{Outcome: fakelink.Hang}
		dctx, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
		defer cancel()
		id, err := NewPublisher(s, "orders").Publish(dctx, Job("urn:a:b", nil))
		if id != "" || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Publish = %q, %v; want context.DeadlineExceeded", id, err)
		}
	})

	for _, tt := range []struct {
		name string
		urn  string
		data any
	}{
		{"empty URN", "", nil},
		{"blank URN", " \t\n", map[string]int{"a": 1}},
		{"data not an object", "urn:a:b", []int{1}},
	} {
		t.Run(tt.name+" sends nothing", func(t *testing.T) {
			s := &fakelink.Sender{}
			id, err := NewPublisher(s, "orders").Publish(ctx, Job(tt.urn, tt.data))
			if id != "" || !errors.Is(err, ErrInvalidEnvelope) {
				t.Errorf("Publish = %q, %v; want an ErrInvalidEnvelope", id, err)
			}
			if n := len(s.Sent()); n != 0 {
				t.Errorf("%d messages sent", n)
			}
		})
	}
}

func TestPublisherPublishEnvelope(t *testing.T) {
	ctx := context.Background()
	s := &fakelink.Sender{}
	env := contractPHP(t)
	env.Attempts = 2
	id, err := NewPublisher(s, "orders").Publish(ctx, env, WithHeaders(map[string]string{"traceparent": "tp"}))
	if err != nil || id != contractMessageID {
		t.Fatalf("PublishEnvelope = %q, %v", id, err)
	}
	if want := mustMessage(t, env, WithHeaders(map[string]string{"traceparent": "tp"})); !reflect.DeepEqual(s.Sent()[0], want) {
		t.Errorf("sent\n%s\nwant\n%s", renderMessage(t, s.Sent()[0]), renderMessage(t, want))
	}

	rej := &fakelink.Sender{Outcome: fakelink.Reject}
	if id, err := NewPublisher(rej, "orders").Publish(ctx, env); id != "" || !errors.Is(err, ErrNotAccepted) {
		t.Errorf("rejected: %q, %v", id, err)
	}
	none := &fakelink.Sender{}
	if id, err := NewPublisher(none, "orders").Publish(ctx, &Envelope{URN: " "}); id != "" || !errors.Is(err, ErrInvalidEnvelope) || len(none.Sent()) != 0 {
		t.Errorf("blank job: %q, %v, %d sent", id, err, len(none.Sent()))
	}
}

func TestSendReusedSendsWhatNewMessageMakes(t *testing.T) {
	at := time.UnixMilli(1_800_000_000_000)
	fresh := func(t *testing.T, urn string) *Envelope {
		env, err := NewEnvelope(urn, map[string]any{"order_id": 7, "note": "café ☕"}, EnvelopeQueue("orders"))
		require.NoError(t, err)
		return env
	}
	cases := []struct {
		name string
		env  func(t *testing.T) *Envelope
		cfg  publishConfig
	}{
		{"fresh envelope", func(t *testing.T) *Envelope { return fresh(t, "urn:a") }, publishConfig{}},
		{"another URN", func(t *testing.T) *Envelope { return fresh(t, "urn:b") }, publishConfig{}},
		{"headers", func(t *testing.T) *Envelope { return fresh(t, "urn:a") },
			publishConfig{headers: map[string]string{"traceparent": "00-abc-def-01", "bq_attempts": "9", " ": "x"}}},
		{"duplicate id", func(t *testing.T) *Envelope { return fresh(t, "urn:a") }, publishConfig{dupID: true}},
		{"delay", func(t *testing.T) *Envelope { return fresh(t, "urn:a") },
			publishConfig{delay: 5 * time.Second, now: func() time.Time { return at }}},
		{"foreign envelope", func(t *testing.T) *Envelope {
			env, err := Decode([]byte(`{"job":"urn:php","trace_id":"t-1","data":{"x":1},` +
				`"meta":{"id":"m-1","queue":"q","lang":"php","schema_version":1,"created_at":0,"extra":true},"attempts":2,"more":[1]}`))
			require.NoError(t, err)
			return env
		}, publishConfig{}},
		{"no ids", func(t *testing.T) *Envelope {
			return &Envelope{URN: "urn:bare", TraceID: "t-1", Meta: Meta{Lang: Lang, SchemaVersion: SchemaVersion}}
		}, publishConfig{dupID: true}},
	}
	p := NewPublisher(nil, "orders")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := tc.env(t)
			cfg := tc.cfg
			want, err := newMessage(context.Background(), env, &cfg)
			require.NoError(t, err)
			s := &fakelink.Sender{Wire: true}
			require.NoError(t, p.sendReused(context.Background(), s, env, &cfg))
			require.Len(t, s.Sent(), 1)
			assert.Equal(t, wireDecoded(t, want), s.Sent()[0])
		})
	}
	// The shared maps were only read.
	assert.Equal(t, map[string]any{PropSchemaVersion: "1", PropSourceLang: "go", PropAttempts: "0", PropAppID: AppID}, freshProperties)
	last := p.lastURN.Load()
	require.NotNil(t, last)
	assert.Equal(t, amqp.Annotations{AnnotationJMSType: last.urn}, last.annotations)
}

// Concurrent publishes with reused messages never see each other's bodies,
// ids or URNs.
func TestSendReusedConcurrentPublishesStayApart(t *testing.T) {
	const workers, each = 8, 200
	s := &fakelink.Sender{Wire: true}
	p := NewPublisher(nil, "orders")
	inWorkers(t, workers, func(w int) error {
		urn := fmt.Sprintf("urn:worker:%d", w%3)
		for i := range each {
			env, err := NewEnvelope(urn, map[string]any{"worker": w, "i": i}, EnvelopeQueue("orders"))
			if err == nil {
				var cfg publishConfig
				if i%5 == 0 {
					cfg.headers = map[string]string{"h": urn}
				}
				err = p.sendReused(context.Background(), s, env, &cfg)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	require.Len(t, s.Sent(), workers*each)
	seen := make(map[string]bool, workers*each)
	for _, msg := range s.Sent() {
		body, ok := msg.Value.(string)
		require.True(t, ok)
		env, err := Decode([]byte(body))
		require.NoError(t, err)
		assert.Equal(t, env.Meta.ID, msg.Properties.MessageID, "message-id is the body's meta.id")
		assert.Equal(t, env.TraceID, msg.Properties.CorrelationID)
		assert.Equal(t, env.URN, msg.Annotations[AnnotationJMSType], "the annotation is the body's URN")
		assert.Equal(t, env.URN, *msg.Properties.Subject)
		var data struct{ Worker, I int }
		require.NoError(t, json.Unmarshal(env.Data, &data))
		assert.Equal(t, fmt.Sprintf("urn:worker:%d", data.Worker%3), env.URN)
		if h, ok := msg.ApplicationProperties["h"]; ok {
			assert.Equal(t, env.URN, h)
			assert.Zero(t, data.I%5)
		}
		assert.False(t, seen[env.Meta.ID], "meta.id %s sent twice", env.Meta.ID)
		seen[env.Meta.ID] = true
	}
}

// A message whose send failed goes back to no pool: the sender may still
// hold it (go-amqp can, when the link dies under a transfer).
func TestSendReusedKeepsAFailedMessage(t *testing.T) {
	kept := &fakelink.Sender{Outcome: fakelink.Fixed(nil, errors.New("link detached")), OutcomeOnly: true}
	p := NewPublisher(nil, "orders")
	env, err := NewEnvelope("urn:a", map[string]any{"n": 1}, EnvelopeQueue("orders"))
	require.NoError(t, err)
	require.Error(t, p.sendReused(context.Background(), kept, env, &publishConfig{}))
	require.Len(t, kept.Sent(), 1)
	failed := kept.Sent()[0]
	before := wireDecoded(t, failed)

	// With the failed message back in the pool, the next publish on this
	// goroutine would be handed it.
	reused := false
	watch := &fakelink.Sender{OutcomeOnly: true, Outcome: func(_ context.Context, msg *amqp.Message) (amqp.DeliveryState, error) {
		if msg == failed {
			reused = true
		}
		return &amqp.StateAccepted{}, nil
	}}
	for i := range 50 {
		env, err := NewEnvelope("urn:b", map[string]any{"n": i + 2}, EnvelopeQueue("orders"))
		require.NoError(t, err)
		require.NoError(t, p.sendReused(context.Background(), watch, env, &publishConfig{}))
	}
	assert.False(t, reused, "the failed message was handed to a later publish")
	assert.Equal(t, before, wireDecoded(t, failed), "the failed message was changed")
}

// The reused path allocates less than newMessage's, and a publish through it
// stays within its budget.
func TestSendReusedAllocations(t *testing.T) {
	p := NewPublisher(nil, "orders")
	s := &fakelink.Sender{Discard: true}
	env, err := NewEnvelope("urn:a", map[string]any{"order_id": 7}, EnvelopeQueue("orders"))
	require.NoError(t, err)
	ctx := context.Background()
	var cfg publishConfig
	reused := testing.AllocsPerRun(100, func() {
		if err := p.sendReused(ctx, s, env, &cfg); err != nil {
			t.Fatal(err)
		}
	})
	built := testing.AllocsPerRun(100, func() {
		msg, err := newMessage(context.Background(), env, &cfg)
		if err == nil {
			err = sendConfirmed(ctx, s, msg)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	// newMessage: the body, the block, two maps and the boxed ids and body.
	// Reused: only the three boxed strings (trace id, meta.id, body).
	assert.LessOrEqual(t, reused, 3.0)
	assert.Greater(t, built, reused)
}

// The trace id belongs to the envelope: set with EnvelopeTraceID where an
// envelope is built (NewEnvelope, Publish, PublishWithReceipt), kept by a
// publish of a built one, whose options cannot even name it.
func TestTraceIDBelongsToTheEnvelope(t *testing.T) {
	env, err := NewEnvelope("urn:babel:orders:created", map[string]int{"order_id": 1}, EnvelopeTraceID("trace-1"))
	require.NoError(t, err)

	msg, err := NewMessage(env, WithPriority(5))
	require.NoError(t, err)
	require.Equal(t, "trace-1", msg.Properties.CorrelationID)

	s := &fakelink.Sender{Outcome: fakelink.Accept}
	p := NewPublisher(s, "orders")
	id, err := p.Publish(context.Background(), env, WithPriority(5))
	require.NoError(t, err)
	require.Equal(t, env.Meta.ID, id)
	require.Len(t, s.Sent(), 1)
	require.Equal(t, "trace-1", s.Sent()[0].Properties.CorrelationID)

	// Publish builds the envelope, so there the envelope's options take
	// effect, mixed with the publish options in any order.
	created := time.UnixMilli(1749132727000)
	_, err = p.Publish(context.Background(), Job("urn:babel:orders:created", nil, EnvelopeTraceID(" trace-3 "), EnvelopeCreatedAt(created)), WithPriority(7))
	require.NoError(t, err)
	sent := s.Sent()[1]
	require.Equal(t, "trace-3", sent.Properties.CorrelationID)
	require.Equal(t, uint8(7), sent.Header.Priority)
	built := sentEnvelope(t, sent)
	require.Equal(t, created.UnixMilli(), built.Meta.CreatedAt)
	require.Equal(t, "orders", built.Meta.Queue, "meta.queue is the Publisher's queue")

	r, err := p.PublishWithReceipt(context.Background(), Job("urn:babel:orders:created", nil, EnvelopeQueue("orders.logical"), EnvelopeTraceID("trace-4")))
	require.NoError(t, err)
	require.NoError(t, r.Wait(context.Background()))
	built = sentEnvelope(t, s.Sent()[2])
	require.Equal(t, "trace-4", built.TraceID)
	require.Equal(t, "orders.logical", built.Meta.Queue, "EnvelopeQueue replaces the Publisher's queue")

	// The compiler keeps an EnvelopeOption away from a publish's options:
	// an envelope's options go to Job or NewEnvelope, and the options of
	// Publish, PublishWithReceipt, NewMessage and NewPublisher are
	// PublishOptions, which an EnvelopeOption is not.
	envOpt := reflect.TypeOf(EnvelopeTraceID(""))
	jobOpts := reflect.TypeOf(Job)
	require.Equal(t, envOpt, jobOpts.In(jobOpts.NumIn()-1).Elem(), "Job takes it")
	for name, f := range map[string]any{
		"Publish":            p.Publish,
		"PublishWithReceipt": p.PublishWithReceipt,
		"NewMessage":         NewMessage,
		"NewPublisher":       NewPublisher,
	} {
		ft := reflect.TypeOf(f)
		last := ft.In(ft.NumIn() - 1).Elem()
		require.Equal(t, reflect.TypeOf((*PublishOption)(nil)).Elem(), last, name)
		require.False(t, envOpt.AssignableTo(last), "%s cannot take an EnvelopeOption", name)
	}
}

// The Publisher's options are applied once; a per-call WithHeaders adds to a
// copy of its headers, never to the Publisher's own.
func TestPerCallHeadersDoNotLeakIntoThePublisher(t *testing.T) {
	s := &fakelink.Sender{}
	p := NewPublisher(s, "orders", WithHeaders(map[string]string{"tenant": "acme"}))
	ctx := context.Background()
	_, err := p.Publish(ctx, Job(urnCreated, nil), WithHeaders(map[string]string{"traceparent": "00-x"}))
	require.NoError(t, err)
	_, err = p.Publish(ctx, Job(urnCreated, nil))
	require.NoError(t, err)
	sent := s.Sent()
	require.Len(t, sent, 2)
	assert.Equal(t, "acme", sent[0].ApplicationProperties["tenant"])
	assert.Equal(t, "00-x", sent[0].ApplicationProperties["traceparent"])
	assert.Equal(t, "acme", sent[1].ApplicationProperties["tenant"])
	assert.NotContains(t, sent[1].ApplicationProperties, "traceparent", "a per-call header stays with its call")
}

// A reused message never carries an option of the publish before it.
func TestReusedMessageForgetsTheOptionsOfTheLastPublish(t *testing.T) {
	ws := &fakelink.Sender{Wire: true}
	p := NewPublisher(ws, "orders")
	for _, opts := range [][]PublishOption{{WithTTL(time.Minute), WithPriority(9), WithGroupID("g")}, nil} {
		env, err := NewEnvelope(urnCreated, nil)
		require.NoError(t, err)
		var cfg publishConfig
		for _, o := range opts {
			o.applyPublish(&cfg)
		}
		require.NoError(t, p.sendReused(context.Background(), ws, env, &cfg))
	}
	last := ws.Sent()[1]
	assert.Zero(t, last.Header.TTL)
	assert.Equal(t, uint8(4), last.Header.Priority)
	assert.Nil(t, last.Properties.GroupID)
}

// received is msg as the broker delivers a message published with a time to
// live: Artemis adds the absolute expiry time it computed.
func received(t *testing.T, msg *amqp.Message) *amqp.Message {
	t.Helper()
	m := wireDecoded(t, msg)
	exp := time.UnixMilli(1_800_000_060_000).UTC()
	m.Properties.AbsoluteExpiryTime = &exp
	return m
}

// Contract section 5: a DLQ copy never expires, and keeps the source's group
// and (this library's choice) its priority.
func TestDeadLetterCopiesDoNotExpireAndKeepGroupAndPriority(t *testing.T) {
	opts := []PublishOption{WithTTL(time.Minute), WithPriority(7), WithGroupID("customer-9"),
		WithHeaders(map[string]string{"traceparent": "00-aa-bb-01"})}
	check := func(t *testing.T, copyMsg *amqp.Message) {
		t.Helper()
		m := wireDecoded(t, copyMsg)
		assert.Zero(t, m.Header.TTL, "no time to live")
		assert.Nil(t, m.Properties.AbsoluteExpiryTime, "no expiry")
		assert.True(t, m.Header.Durable)
		assert.Equal(t, uint8(7), m.Header.Priority, "priority kept")
		require.NotNil(t, m.Properties.GroupID)
		assert.Equal(t, "customer-9", *m.Properties.GroupID, "group-id kept")
		assert.Equal(t, "00-aa-bb-01", m.ApplicationProperties["traceparent"])
	}
	t.Run("failed handler", func(t *testing.T) {
		dlq := &fakelink.Sender{}
		c := mustConsumer(t, Handlers{urnCreated: failing(errors.New("x"))}, WithDeadLetterSender(dlq))
		got := handleOne(t, c, newRecorder(), dlq, received(t, orderMessage(t, 2, opts...)))
		require.Len(t, got.dlq, 1)
		check(t, got.dlq[0])
	})
	t.Run("unknown URN", func(t *testing.T) {
		dlq := &fakelink.Sender{}
		c := mustConsumer(t, Handlers{}, WithDeadLetterSender(dlq), WithUnknownURN(UnknownURNDeadLetter))
		got := handleOne(t, c, newRecorder(), dlq, received(t, orderMessage(t, 0, opts...)))
		require.Len(t, got.dlq, 1)
		check(t, got.dlq[0])
	})
	t.Run("forwarded as received", func(t *testing.T) {
		check(t, forwardCopy(received(t, orderMessage(t, 0, opts...)), "orders"))
	})
	t.Run("defaults stay defaults", func(t *testing.T) {
		src := received(t, orderMessage(t, 2))
		for _, m := range []*amqp.Message{forwardCopy(src, "orders"),
			deadLetterEnvelope(mustDecode(t, src.Value.(string)), newDeadLetter(ReasonFailed, nil, "orders", 2, time.Now()), src, "orders")} {
			m = wireDecoded(t, m)
			assert.Zero(t, m.Header.TTL)
			assert.Nil(t, m.Properties.AbsoluteExpiryTime)
			assert.Equal(t, uint8(4), m.Header.Priority)
			assert.Nil(t, m.Properties.GroupID)
		}
	})
	t.Run("a source without header or properties", func(t *testing.T) {
		src := received(t, orderMessage(t, 0))
		env := mustDecode(t, src.Value.(string))
		src.Header, src.Properties = nil, nil
		m := wireDecoded(t, deadLetterEnvelope(env, newDeadLetter(ReasonFailed, nil, "orders", 0, time.Now()), src, "orders"))
		assert.Equal(t, uint8(4), m.Header.Priority)
		assert.Nil(t, m.Properties.GroupID)
	})
}

// A publish without options shares one zero configuration instead of
// allocating one; options never write to it.
func TestPublishWithoutOptionsAllocatesNoConfig(t *testing.T) {
	plain := NewPublisher(&fakelink.Sender{}, "orders")
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = plain.config(nil) }))
	assert.Same(t, &noOptions, plain.config(nil))

	withOpts := NewPublisher(&fakelink.Sender{}, "orders", WithPriority(9), WithGroupID("g"))
	cfg := withOpts.config([]PublishOption{WithTTL(time.Second), WithHeaders(map[string]string{"k": "v"})})
	assert.NotSame(t, &noOptions, cfg)
	assert.Equal(t, 9, cfg.priority)
	assert.Equal(t, "g", cfg.groupID)
	assert.Equal(t, time.Second, cfg.ttl)
	_, err := plain.Publish(context.Background(), Job(urnCreated, nil), WithPriority(3))
	require.NoError(t, err)
	assert.Equal(t, publishConfig{}, noOptions, "the shared configuration is never written")
}

// goAMQPCheckedForReuse is the go-amqp version whose Sender was read and
// tested (TestPooledMessageIsNotKeptByGoAMQP) to copy a message out during
// Send and SendWithReceipt and keep no reference to it, which the pooled
// messages of Publisher rely on (see pooledMessage). Upgrading go-amqp
// fails TestGoAMQPVersionIsTheOneCheckedForReuse until the new version's
// sender.go is read again, the integration test passes against it, and this
// constant is moved.
const goAMQPCheckedForReuse = "v1.7.0"

// The module's go.mod is what the library builds against (a test binary has
// no dependency list in its build information).
func TestGoAMQPVersionIsTheOneCheckedForReuse(t *testing.T) {
	b, err := os.ReadFile("go.mod")
	require.NoError(t, err)
	var versions []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require"))
		if len(f) >= 2 && f[0] == "github.com/Azure/go-amqp" {
			versions = append(versions, f[1])
		}
		require.False(t, strings.HasPrefix(strings.TrimSpace(line), "replace") && strings.Contains(line, "go-amqp"),
			"go-amqp is replaced: check the replacement for message reuse (see pooledMessage)")
	}
	require.Equal(t, []string{goAMQPCheckedForReuse}, versions,
		"go-amqp changed: check that (*amqp.Sender).send still marshals the message and copies the payload before it returns, run TestPooledMessageIsNotKeptByGoAMQP on a broker, then move goAMQPCheckedForReuse")
}

// noCredit is go-amqp's SendWithReceipt on a link the broker grants no
// credit (an Artemis address under BLOCK): it waits for ctx, then says
// transfer-limit-exceeded.
type noCredit struct{}

func (noCredit) Send(context.Context, *amqp.Message, *amqp.SendOptions) error {
	panic("the transfer must go through SendWithReceipt")
}

func (noCredit) SendWithReceipt(ctx context.Context, _ *amqp.Message, _ *amqp.SendWithReceiptOptions) (amqp.SendReceipt, error) {
	<-ctx.Done()
	return amqp.SendReceipt{}, &amqp.Error{Condition: amqp.ErrCondTransferLimitExceeded, Description: "credit limit exceeded for sending link x"}
}

// A publish whose ctx ends while it waits for link credit returns an error
// matching ctx's, and go-amqp's error with it.
func TestPublishEndedWhileWaitingForCreditMatchesItsContext(t *testing.T) {
	p := NewPublisher(noCredit{}, "orders")
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 10*time.Millisecond)
		}, context.DeadlineExceeded},
		{"canceled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			go func() { time.Sleep(10 * time.Millisecond); cancel() }()
			return ctx, cancel
		}, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.ctx()
			defer cancel()
			_, err := p.Publish(ctx, Job(urnCreated, nil))
			require.ErrorIs(t, err, tc.want)
			var ae *amqp.Error
			require.ErrorAs(t, err, &ae)
			assert.Equal(t, amqp.ErrCondTransferLimitExceeded, ae.Condition)
			assert.NotErrorIs(t, err, ErrOutcomeUnknown, "nothing was written")

			ctx, cancel = tc.ctx()
			defer cancel()
			_, err = p.PublishWithReceipt(ctx, Job(urnCreated, nil))
			require.ErrorIs(t, err, tc.want)
		})
	}
}

// exitsOnce is a PayloadValidator whose first check exits the goroutine
// (runtime.Goexit, as t.FailNow in a test's validator does); the others
// pass.
type exitsOnce struct{ calls atomic.Int32 }

func (v *exitsOnce) ValidatePayload(context.Context, string, json.RawMessage) error {
	if v.calls.Add(1) == 1 {
		runtime.Goexit()
	}
	return nil
}

// A publish-side validator runs on the caller's goroutine, so one that
// exits it (runtime.Goexit) ends the caller, as any code the caller runs
// would: Publish and PublishWithReceipt never return. Nothing is left
// half-done: nothing is sent, the Observer hears of no publish (the one
// it heard before was an accepted one that never was), and the next
// publish on the same ClientPublisher goes out as usual.
func TestPublishWhoseValidatorExitsLeavesNothingHalfDone(t *testing.T) {
	for name, publish := range publishWays {
		t.Run(name, func(t *testing.T) {
			obs := &observed{}
			h := newHarness(t, []string{"amqp://live:5672"}, nil, nil)
			require.NoError(t, h.dial())
			p, err := h.c.Publisher(context.Background(), "orders", WithObserver(obs))
			require.NoError(t, err)
			v := WithPayloadValidator(&exitsOnce{})

			returned := make(chan bool, 1)
			go func() {
				ok := false
				defer func() { returned <- ok }()
				_ = publish(context.Background(), p.Publisher, v)
				ok = true
			}()
			select {
			case ok := <-returned:
				require.False(t, ok, "the validator's Goexit ended the caller's goroutine")
			case <-time.After(5 * time.Second):
				t.Fatal("the publish whose validator exited neither returned nor ended")
			}
			senders := h.fb.conn(0).sendersTo("orders")
			require.Len(t, senders, 1)
			assert.Empty(t, senders[0].Sent(), "nothing sent")
			assert.Empty(t, obs.publishes(), "no publish to report")

			done := make(chan error, 1)
			go func() { done <- publish(context.Background(), p.Publisher, v) }()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(5 * time.Second):
				t.Fatal("the next publish on the same publisher hung")
			}
			assert.Len(t, senders[0].Sent(), 1)
			require.Len(t, obs.publishes(), 1)
			assert.Equal(t, PublishAccepted, obs.publishes()[0].Outcome)
		})
	}
}
