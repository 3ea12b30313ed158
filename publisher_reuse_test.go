package artemis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// wireSender is an OutcomeSender that keeps what a link would put on the
// wire: each message encoded while Send runs, as go-amqp does, and decoded
// again. It never keeps the *amqp.Message itself, so it may be given the
// reused messages of Publisher.sendReused.
type wireSender struct {
	t    testing.TB
	fail error // when set, every send fails with it

	mu   sync.Mutex
	sent []*amqp.Message
}

func (s *wireSender) Send(ctx context.Context, msg *amqp.Message, _ *amqp.SendOptions) error {
	_, err := s.SendOutcome(ctx, msg)
	return err
}

func (s *wireSender) SendOutcome(_ context.Context, msg *amqp.Message) (amqp.DeliveryState, error) {
	b, err := msg.MarshalBinary()
	if err != nil {
		return nil, err
	}
	if s.fail != nil {
		return nil, s.fail
	}
	var got amqp.Message
	if err := got.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.sent = append(s.sent, &got)
	s.mu.Unlock()
	return &amqp.StateAccepted{}, nil
}

// onWire is msg as a receiver decodes it.
func onWire(t *testing.T, msg *amqp.Message) *amqp.Message {
	t.Helper()
	b, err := msg.MarshalBinary()
	require.NoError(t, err)
	var got amqp.Message
	require.NoError(t, got.UnmarshalBinary(b))
	return &got
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
			return &Envelope{Job: "urn:bare", Meta: Meta{Lang: Lang, SchemaVersion: SchemaVersion}}
		}, publishConfig{dupID: true}},
	}
	p := NewPublisher(nil, "orders")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := tc.env(t)
			cfg := tc.cfg
			want, err := newMessage(env, &cfg)
			require.NoError(t, err)
			s := &wireSender{t: t}
			require.NoError(t, p.sendReused(context.Background(), s, env, &cfg))
			require.Len(t, s.sent, 1)
			assert.Equal(t, onWire(t, want), s.sent[0])
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
	s := &wireSender{t: t}
	p := NewPublisher(nil, "orders")
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
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
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, s.sent, workers*each)
	seen := make(map[string]bool, workers*each)
	for _, msg := range s.sent {
		body, ok := msg.Value.(string)
		require.True(t, ok)
		env, err := Decode([]byte(body))
		require.NoError(t, err)
		assert.Equal(t, env.Meta.ID, msg.Properties.MessageID, "message-id is the body's meta.id")
		assert.Equal(t, env.TraceID, msg.Properties.CorrelationID)
		assert.Equal(t, env.Job, msg.Annotations[AnnotationJMSType], "the annotation is the body's URN")
		assert.Equal(t, env.Job, *msg.Properties.Subject)
		var data struct{ Worker, I int }
		require.NoError(t, json.Unmarshal(env.Data, &data))
		assert.Equal(t, fmt.Sprintf("urn:worker:%d", data.Worker%3), env.Job)
		if h, ok := msg.ApplicationProperties["h"]; ok {
			assert.Equal(t, env.Job, h)
			assert.Zero(t, data.I%5)
		}
		assert.False(t, seen[env.Meta.ID], "meta.id %s sent twice", env.Meta.ID)
		seen[env.Meta.ID] = true
	}
}

// A message whose send failed goes back to no pool: the sender may still
// hold it (go-amqp can, when the link dies under a transfer).
func TestSendReusedKeepsAFailedMessage(t *testing.T) {
	kept := &keepingSender{fail: errors.New("link detached")}
	p := NewPublisher(nil, "orders")
	env, err := NewEnvelope("urn:a", map[string]any{"n": 1}, EnvelopeQueue("orders"))
	require.NoError(t, err)
	require.Error(t, p.sendReused(context.Background(), kept, env, &publishConfig{}))
	require.NotNil(t, kept.msg)
	before := onWire(t, kept.msg)

	// With the failed message back in the pool, the next publish on this
	// goroutine would be handed it.
	reused := false
	watch := outcomeFunc(func(msg *amqp.Message) {
		if msg == kept.msg {
			reused = true
		}
	})
	for i := range 50 {
		env, err := NewEnvelope("urn:b", map[string]any{"n": i + 2}, EnvelopeQueue("orders"))
		require.NoError(t, err)
		require.NoError(t, p.sendReused(context.Background(), watch, env, &publishConfig{}))
	}
	assert.False(t, reused, "the failed message was handed to a later publish")
	assert.Equal(t, before, onWire(t, kept.msg), "the failed message was changed")
}

// outcomeFunc is an OutcomeSender that calls itself and accepts.
type outcomeFunc func(msg *amqp.Message)

func (f outcomeFunc) Send(_ context.Context, msg *amqp.Message, _ *amqp.SendOptions) error {
	f(msg)
	return nil
}

func (f outcomeFunc) SendOutcome(_ context.Context, msg *amqp.Message) (amqp.DeliveryState, error) {
	f(msg)
	return &amqp.StateAccepted{}, nil
}

// keepingSender keeps the message of its one failed send.
type keepingSender struct {
	fail error
	msg  *amqp.Message
}

func (s *keepingSender) Send(context.Context, *amqp.Message, *amqp.SendOptions) error {
	return errors.New("keepingSender: use SendOutcome")
}

func (s *keepingSender) SendOutcome(_ context.Context, msg *amqp.Message) (amqp.DeliveryState, error) {
	s.msg = msg
	return nil, s.fail
}

// The reused path allocates less than newMessage's, and a publish through it
// stays within its budget.
func TestSendReusedAllocations(t *testing.T) {
	p := NewPublisher(nil, "orders")
	s := &benchSender{}
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
		msg, err := newMessage(env, &cfg)
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
