package artemis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// dlqCopy runs msg through a consumer that dead-letters it and returns the
// DLQ copy the broker was given.
func dlqCopy(t *testing.T, msg *amqp.Message, opts ...ConsumerOption) *amqp.Message {
	t.Helper()
	dlq := &fakelink.Sender{}
	opts = append([]ConsumerOption{WithDeadLetterSender(dlq), WithMaxTries(1), WithQueue("orders")}, opts...)
	cons := mustConsumer(t, Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error {
		return errors.New("gateway down")
	}}, opts...)
	r := fakelink.NewReceiver(t, "orders")
	_ = cons.Handle(context.Background(), r, msg)
	d, ok := r.Disposition(msg)
	require.True(t, ok)
	require.Equal(t, fakelink.Accepted, d, "dead-lettered, then accepted")
	kept := dlq.Kept()
	require.Len(t, kept, 1)
	return kept[0]
}

// redelivered is msg as the broker sends the same stored message again:
// the same properties and application properties, one more delivery.
func redelivered(msg *amqp.Message) *amqp.Message {
	cp := *msg
	h := *msg.Header
	h.DeliveryCount++
	cp.Header = &h
	return &cp
}

func dupID(m *amqp.Message) string {
	s, _ := m.ApplicationProperties[PropDuplicateID].(string)
	return s
}

func TestADeadLetteringRepeatedAfterALostAcceptHasOneDuplicateID(t *testing.T) {
	gated := func(t *testing.T) *amqp.Message {
		m := orderMessage(t, 0, WithDuplicateDetection())
		m.ApplicationProperties[PropSchemaVersion] = "2"
		return m
	}
	poison := func(*testing.T) *amqp.Message {
		m := rawMessage("{not an envelope")
		m.Properties = &amqp.MessageProperties{MessageID: "foreign-7"}
		m.ApplicationProperties = map[string]any{PropDuplicateID: "foreign-7"}
		return m
	}
	unknown := func(t *testing.T) *amqp.Message {
		env, err := NewEnvelope("urn:babel:orders:nobody", orderData, EnvelopeQueue("orders"))
		require.NoError(t, err)
		m, err := NewMessage(env, WithDuplicateDetection())
		require.NoError(t, err)
		return m
	}
	cases := []struct {
		name string
		msg  func(*testing.T) *amqp.Message
		opts []ConsumerOption
	}{
		{"failed, published with duplicate detection", func(t *testing.T) *amqp.Message { return orderMessage(t, 0, WithDuplicateDetection()) }, nil},
		{"failed, published without", func(t *testing.T) *amqp.Message { return orderMessage(t, 0) }, nil},
		{"unknown URN", unknown, []ConsumerOption{WithUnknownURN(UnknownURNDeadLetter)}},
		{"gated", gated, nil},
		{"poison", poison, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.msg(t)
			srcDup := dupID(src)
			first := dlqCopy(t, src, tc.opts...)
			again := dlqCopy(t, redelivered(src), tc.opts...)

			id := dupID(first)
			assert.True(t, strings.HasPrefix(id, deadLetterIDPrefix), "the DLQ copy has its own duplicate id: %q", id)
			assert.NotEqual(t, srcDup, id, "not the source's")
			assert.Equal(t, id, dupID(again), "the same stored message dead-lettered again: Artemis keeps one copy")
			assert.Equal(t, srcDup, dupID(src), "the source is not modified")
		})
	}
}

func TestARedrivenMessageThatFailsAgainIsANewDeadLettering(t *testing.T) {
	src := orderMessage(t, 0, WithDuplicateDetection())
	first := dlqCopy(t, src)

	// A redrive publishes the envelope again (same meta.id, attempts 0)
	// with a new _AMQ_DUPL_ID, as examples/redrive does; it fails again.
	env, err := Decode([]byte(src.Value.(string)))
	require.NoError(t, err)
	again, err := NewMessage(env, WithHeaders(map[string]string{PropDuplicateID: "redrive-1"}))
	require.NoError(t, err)
	again.ApplicationProperties[PropDuplicateID] = "redrive-1"
	require.Equal(t, src.Properties.MessageID, again.Properties.MessageID, "the same meta.id")
	second := dlqCopy(t, again)
	assert.NotEqual(t, dupID(first), dupID(second), "a new dead-lettering is not taken for a duplicate")

	// Published again with neither a duplicate id nor the same
	// creation-time (PublishEnvelope of the same envelope, later).
	later, err := NewMessage(env)
	require.NoError(t, err)
	ct := src.Properties.CreationTime.Add(time.Millisecond)
	later.Properties.CreationTime = &ct
	third := dlqCopy(t, later)
	assert.NotEqual(t, dupID(first), dupID(third))
	assert.NotEqual(t, dupID(second), dupID(third))
}

func TestADeadLetterCopyWithoutAMessageIDHasNoDuplicateID(t *testing.T) {
	m := rawMessage("{not an envelope")
	m.ApplicationProperties = map[string]any{PropDuplicateID: "theirs"}
	cp := dlqCopy(t, m)
	assert.NotContains(t, cp.ApplicationProperties, PropDuplicateID,
		"nothing tells two such messages apart: no duplicate id, and not the source's")
	assert.Equal(t, "theirs", m.ApplicationProperties[PropDuplicateID], "the source is not modified")
}
