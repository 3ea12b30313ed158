package artemis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

func TestTTLPriorityAndGroupOnTheWire(t *testing.T) {
	cases := map[string]struct {
		opts     []PublishOption
		ttl      time.Duration
		priority uint8
		group    string // "" none
	}{
		"defaults":         {priority: 4},
		"ttl":              {opts: []PublishOption{WithTTL(90 * time.Second)}, ttl: 90 * time.Second, priority: 4},
		"ttl rounded up":   {opts: []PublishOption{WithTTL(time.Nanosecond)}, ttl: time.Millisecond, priority: 4},
		"ttl 1.5 ms":       {opts: []PublishOption{WithTTL(1500 * time.Microsecond)}, ttl: 2 * time.Millisecond, priority: 4},
		"ttl 0 is none":    {opts: []PublishOption{WithTTL(time.Minute), WithTTL(0)}, priority: 4},
		"ttl maximum":      {opts: []PublishOption{WithTTL(maxTTL)}, ttl: maxTTL, priority: 4},
		"priority 0":       {opts: []PublishOption{WithPriority(0)}, priority: 0},
		"priority 9":       {opts: []PublishOption{WithPriority(9)}, priority: 9},
		"group":            {opts: []PublishOption{WithGroupID("customer-42")}, priority: 4, group: "customer-42"},
		"group cleared":    {opts: []PublishOption{WithGroupID("a"), WithGroupID("")}, priority: 4},
		"all three":        {opts: []PublishOption{WithTTL(time.Hour), WithPriority(7), WithGroupID("g")}, ttl: time.Hour, priority: 7, group: "g"},
		"with the headers": {opts: []PublishOption{WithGroupID("g"), WithHeaders(map[string]string{"k": "v"})}, priority: 4, group: "g"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			env, err := NewEnvelope(urnCreated, map[string]int{"n": 1}, EnvelopeQueue("orders"))
			require.NoError(t, err)
			var cfg publishConfig
			for _, o := range tc.opts {
				o(&cfg)
			}
			fresh, err := newMessage(env, &cfg)
			require.NoError(t, err)
			ws := &fakelink.Sender{Wire: true}
			p := NewPublisher(ws, "orders")
			require.NoError(t, p.sendReused(context.Background(), ws, env, &cfg))
			for path, msg := range map[string]*amqp.Message{"new": onWire(t, fresh), "reused": ws.Sent()[0]} {
				assert.Equal(t, tc.ttl, msg.Header.TTL, path)
				assert.Equal(t, tc.priority, msg.Header.Priority, path)
				assert.True(t, msg.Header.Durable, path)
				if tc.group == "" {
					assert.Nil(t, msg.Properties.GroupID, path)
				} else if assert.NotNil(t, msg.Properties.GroupID, path) {
					assert.Equal(t, tc.group, *msg.Properties.GroupID, path)
				}
				assert.Nil(t, msg.Properties.AbsoluteExpiryTime, "the broker sets the expiry from the ttl: %s", path)
			}
		})
	}
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
			o(&cfg)
		}
		require.NoError(t, p.sendReused(context.Background(), ws, env, &cfg))
	}
	last := ws.Sent()[1]
	assert.Zero(t, last.Header.TTL)
	assert.Equal(t, uint8(4), last.Header.Priority)
	assert.Nil(t, last.Properties.GroupID)
}

func TestOutOfRangeOptionsAreRefused(t *testing.T) {
	cases := map[string]PublishOption{
		"priority -1":    WithPriority(-1),
		"priority 10":    WithPriority(10),
		"negative ttl":   WithTTL(-time.Millisecond),
		"ttl over 2^32":  WithTTL(maxTTL + time.Millisecond),
		"ttl of a year":  WithTTL(365 * 24 * time.Hour),
		"priority 1000":  WithPriority(1000),
		"priority -1000": WithPriority(-1000),
	}
	for name, opt := range cases {
		t.Run(name, func(t *testing.T) {
			fs := &fakelink.Sender{}
			_, err := NewPublisher(fs, "orders").Publish(context.Background(), urnCreated, nil, opt)
			require.ErrorIs(t, err, ErrInvalidConfig)
			_, err = NewPublisher(fs, "orders", opt).Publish(context.Background(), urnCreated, nil)
			require.ErrorIs(t, err, ErrInvalidConfig, "given to NewPublisher")
			_, err = NewPublisher(fs, "orders").PublishWithReceipt(context.Background(), urnCreated, nil, opt)
			require.ErrorIs(t, err, ErrInvalidConfig)
			env, err := NewEnvelope(urnCreated, nil)
			require.NoError(t, err)
			_, err = NewMessage(env, opt)
			require.ErrorIs(t, err, ErrInvalidConfig)
			ws := &fakelink.Sender{Wire: true}
			var cfg publishConfig
			opt(&cfg)
			require.ErrorIs(t, NewPublisher(ws, "orders").sendReused(context.Background(), ws, env, &cfg), ErrInvalidConfig)
			assert.Empty(t, fs.Sent(), "nothing sent")
			assert.Empty(t, ws.Sent(), "nothing sent")
		})
	}
}

// received is msg as the broker delivers a message published with a time to
// live: Artemis adds the absolute expiry time it computed.
func received(t *testing.T, msg *amqp.Message) *amqp.Message {
	t.Helper()
	m := onWire(t, msg)
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
		m := onWire(t, copyMsg)
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
			m = onWire(t, m)
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
		m := onWire(t, deadLetterEnvelope(env, newDeadLetter(ReasonFailed, nil, "orders", 0, time.Now()), src, "orders"))
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
	_, err := plain.Publish(context.Background(), urnCreated, nil, WithPriority(3))
	require.NoError(t, err)
	assert.Equal(t, publishConfig{}, noOptions, "the shared configuration is never written")
}
