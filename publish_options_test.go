package artemis

import (
	"bytes"
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWithHeaders(t *testing.T) {
	base := mustMessage(t, contractPHP(t))
	baseRender := renderMessage(t, base)

	t.Run("no headers is identical to no option", func(t *testing.T) {
		for name, opt := range map[string]PublishOption{
			"nil map":       WithHeaders(nil),
			"empty map":     WithHeaders(map[string]string{}),
			"empty carrier": WithHeaders(HeaderCarrier{}),
			"only blanks":   WithHeaders(map[string]string{"": "v", " ": "v", "k": "", "k2": "  ", "\t": "\t"}),
		} {
			msg := mustMessage(t, contractPHP(t), opt)
			if !reflect.DeepEqual(msg, base) {
				t.Errorf("%s: message differs from a publish without headers:\n%s\nwant\n%s", name, renderMessage(t, msg), baseRender)
			}
			if got := renderMessage(t, msg); !bytes.Equal(got, baseRender) {
				t.Errorf("%s: rendering differs", name)
			}
		}
	})

	t.Run("headers ride beside the contract properties", func(t *testing.T) {
		msg := mustMessage(t, contractPHP(t), WithHeaders(map[string]string{
			"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
			"tracestate":  "rojo=00f067aa0ba902b7",
			" padded ":    " value kept as is ", //nolint:gocritic // a key with spaces on purpose
		}))
		want := map[string]any{
			"bq_schema_version": "1", "bq_source_lang": "php", "bq_attempts": "0", "bq_app_id": "babelqueue",
			"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
			"tracestate":  "rojo=00f067aa0ba902b7",
			" padded ":    " value kept as is ", //nolint:gocritic // a key with spaces on purpose
		}
		if !reflect.DeepEqual(msg.ApplicationProperties, want) {
			t.Errorf("application properties %#v, want %#v", msg.ApplicationProperties, want)
		}
		// Headers change nothing else.
		msg.ApplicationProperties = base.ApplicationProperties
		if !reflect.DeepEqual(msg, base) {
			t.Errorf("headers changed more than the application properties")
		}
	})

	t.Run("a bq_ collision loses to the contract value", func(t *testing.T) {
		msg := mustMessage(t, contractPHP(t), WithHeaders(map[string]string{
			"bq_schema_version": "2", "bq_source_lang": "go", "bq_attempts": "7", "bq_app_id": "other",
		}))
		if !reflect.DeepEqual(msg.ApplicationProperties, base.ApplicationProperties) {
			t.Errorf("application properties %#v, want %#v", msg.ApplicationProperties, base.ApplicationProperties)
		}
	})

	t.Run("several WithHeaders merge, later wins", func(t *testing.T) {
		msg := mustMessage(t, contractPHP(t),
			WithHeaders(map[string]string{"a": "1", "b": "1"}),
			WithHeaders(map[string]string{"b": "2", "c": "2"}))
		for k, want := range map[string]string{"a": "1", "b": "2", "c": "2"} {
			if got := msg.ApplicationProperties[k]; got != want {
				t.Errorf("%s = %#v, want %q", k, got, want)
			}
		}
	})

	t.Run("the caller's map is not modified", func(t *testing.T) {
		h := map[string]string{"": "x", "k": "v"}
		mustMessage(t, contractPHP(t), WithHeaders(h))
		if len(h) != 2 || h[""] != "x" || h["k"] != "v" {
			t.Errorf("caller's map changed: %v", h)
		}
	})
}

func TestWithDelay(t *testing.T) {
	tests := []struct {
		name  string
		delay time.Duration
		want  int64 // 0: no annotation
	}{
		{"one millisecond", time.Millisecond, 1749132727251},
		{"ninety seconds", 90 * time.Second, 1749132817250},
		{"one hour", time.Hour, 1749136327250},
		{"sub-millisecond rounds down", 1500 * time.Microsecond, 1749132727251},
		{"one nanosecond", time.Nanosecond, 1749132727250},
		{"zero", 0, 0},
		{"negative", -time.Minute, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := mustMessage(t, contractPHP(t), withClock(fixedClock), WithDelay(tt.delay))
			v, ok := msg.Annotations[AnnotationDeliveryTime]
			if tt.want == 0 {
				if ok {
					t.Errorf("x-opt-delivery-time set to %#v for a delay of %v", v, tt.delay)
				}
				if !reflect.DeepEqual(msg, mustMessage(t, contractPHP(t))) {
					t.Errorf("a delay <= 0 changed the message")
				}
				return
			}
			ms, isLong := v.(int64)
			if !isLong {
				t.Fatalf("x-opt-delivery-time is %#v (%T), want an int64 (AMQP long)", v, v)
			}
			if ms != tt.want {
				t.Errorf("x-opt-delivery-time %d, want %d", ms, tt.want)
			}
			if _, rel := msg.Annotations[AnnotationDeliveryDelay]; rel {
				t.Errorf("x-opt-delivery-delay set beside x-opt-delivery-time")
			}
			if msg.Annotations[AnnotationJMSType] != "urn:babel:orders:created" {
				t.Errorf("x-opt-jms-type lost: %v", msg.Annotations)
			}
		})
	}

	t.Run("real clock", func(t *testing.T) {
		before := time.Now().Add(time.Minute).UnixMilli()
		msg := mustMessage(t, contractPHP(t), WithDelay(time.Minute))
		after := time.Now().Add(time.Minute).UnixMilli()
		ms, _ := msg.Annotations[AnnotationDeliveryTime].(int64)
		if ms < before || ms > after {
			t.Errorf("x-opt-delivery-time %d not in [%d, %d]", ms, before, after)
		}
	})
}

func TestWithDuplicateDetection(t *testing.T) {
	msg := mustMessage(t, contractPHP(t), WithDuplicateDetection())
	if got := msg.ApplicationProperties[PropDuplicateID]; got != contractMessageID {
		t.Errorf("_AMQ_DUPL_ID %#v, want %q", got, contractMessageID)
	}
	if len(msg.ApplicationProperties) != 5 {
		t.Errorf("application properties %v, want the four bq_ ones and _AMQ_DUPL_ID", msg.ApplicationProperties)
	}
	if _, ok := mustMessage(t, contractPHP(t)).ApplicationProperties[PropDuplicateID]; ok {
		t.Errorf("_AMQ_DUPL_ID set without WithDuplicateDetection")
	}
	noID := contractPHP(t)
	noID.Meta.ID = ""
	if v, ok := mustMessage(t, noID, WithDuplicateDetection()).ApplicationProperties[PropDuplicateID]; ok {
		t.Errorf("_AMQ_DUPL_ID %#v set from an empty meta.id", v)
	}
	// A header of the same name does not override it either.
	msg = mustMessage(t, contractPHP(t), WithHeaders(map[string]string{PropDuplicateID: "mine"}), WithDuplicateDetection())
	if got := msg.ApplicationProperties[PropDuplicateID]; got != contractMessageID {
		t.Errorf("_AMQ_DUPL_ID %#v, want meta.id", got)
	}
}

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
				o.applyPublish(&cfg)
			}
			fresh, err := newMessage(context.Background(), env, &cfg)
			require.NoError(t, err)
			ws := &fakelink.Sender{Wire: true}
			p := NewPublisher(ws, "orders")
			require.NoError(t, p.sendReused(context.Background(), ws, env, &cfg))
			for path, msg := range map[string]*amqp.Message{"new": wireDecoded(t, fresh), "reused": ws.Sent()[0]} {
				assert.Equal(t, tc.ttl, msg.Header.TTL, path)
				assert.Equal(t, tc.priority, msg.Header.Priority, path)
				assert.True(t, msg.Header.Durable, path)
				if tc.group == "" {
					assert.Nil(t, msg.Properties.GroupID, path)
				} else if assert.NotNil(t, msg.Properties.GroupID, path) {
					assert.Equal(t, tc.group, *msg.Properties.GroupID, path)
				}
				if tc.ttl == 0 {
					assert.Nil(t, msg.Properties.AbsoluteExpiryTime, "no ttl, no expiry: %s", path)
				} else if assert.NotNil(t, msg.Properties.AbsoluteExpiryTime, path) {
					// Creation + ttl (contract section 2): the time a cluster
					// keeps when it moves the message.
					want := time.UnixMilli(env.Meta.CreatedAt).Add(tc.ttl)
					assert.True(t, want.Equal(*msg.Properties.AbsoluteExpiryTime), "%s: expiry %v, want %v", path, *msg.Properties.AbsoluteExpiryTime, want)
				}
			}
		})
	}
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
			_, err := NewPublisher(fs, "orders").Publish(context.Background(), Job(urnCreated, nil), opt)
			require.ErrorIs(t, err, ErrInvalidConfig)
			_, err = NewPublisher(fs, "orders", opt).Publish(context.Background(), Job(urnCreated, nil))
			require.ErrorIs(t, err, ErrInvalidConfig, "given to NewPublisher")
			_, err = NewPublisher(fs, "orders").PublishWithReceipt(context.Background(), Job(urnCreated, nil), opt)
			require.ErrorIs(t, err, ErrInvalidConfig)
			env, err := NewEnvelope(urnCreated, nil)
			require.NoError(t, err)
			_, err = NewMessage(env, opt)
			require.ErrorIs(t, err, ErrInvalidConfig)
			ws := &fakelink.Sender{Wire: true}
			var cfg publishConfig
			opt.applyPublish(&cfg)
			require.ErrorIs(t, NewPublisher(ws, "orders").sendReused(context.Background(), ws, env, &cfg), ErrInvalidConfig)
			assert.Empty(t, fs.Sent(), "nothing sent")
			assert.Empty(t, ws.Sent(), "nothing sent")
		})
	}
}
